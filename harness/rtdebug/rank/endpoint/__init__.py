"""A rank's debug endpoint, one package with one public class: ``Endpoint`` (``port``), ready to attach on
``host:port`` at near-zero cost; import it from here. Runs in every rank (torchrun rank, ``rtdebug run``,
a Ray Train worker, an adopted rank).

Its parts: ``port`` (the class: the listening socket, the accept loop, each client's relay), ``rtdebug.common.access``
(who gets in: the peer's uid, the allow-list), ``dapgate`` (what gets in: a DAP ``initialize`` first),
``pydevd_socket`` (pydevd's server socket as a handoff, no second listener), ``refusals`` (refused
connections, at most a line a second), ``tracing`` (debugpy traces only while a client is attached),
``gil`` (a short switch interval while a client's handshake runs) and ``warmup`` (debugpy imported in the
background).
"""

from rtdebug.rank.endpoint.port import Endpoint, debugger_active

__all__ = ["Endpoint", "debugger_active"]
