"""How pydevd gets its client without a listening socket of its own (see ``rtdebug.rank.endpoint``).

``debugpy.listen(in_process_debug_adapter=True)`` would leave pydevd listening on an
ephemeral 127.0.0.1 port that any local user could reach, bypassing the rank's uid check.
While debugpy starts, pydevd's ``create_server_socket`` returns a ``Handoff`` instead, whose
``accept()`` yields one end of a fresh ``socketpair()`` for each client the endpoint admitted.
If a debugpy release stops calling that hook, starting debugpy fails (closed), never open.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
import weakref
from collections.abc import Callable


class Handoff:
    """Stands in for pydevd's listening socket: ``accept()`` yields sockets the relay hands over."""

    NAME = ("rtdebug-handoff", 0)

    def __init__(self) -> None:
        self._queue: queue.Queue[socket.socket | None] = queue.Queue()
        self._given: list[weakref.ref[socket.socket]] = []  # pydevd's ends, still referenced somewhere or gone

    def connect(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        self._given = [r for r in self._given if r() is not None]
        self._given.append(weakref.ref(theirs))
        self._queue.put(theirs)
        return ours

    def release(self) -> None:
        """Shut and close every end handed to pydevd that is still open: pydevd never closes the end of a client
        that left before the next one came (``rtdebug.rank.unadopt``, once debugpy is stopped)."""
        for ref in self._given:
            sock = ref()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        self._given.clear()

    def accept(self) -> tuple[socket.socket, tuple[str, int]]:
        conn = self._queue.get()
        if conn is None:
            raise OSError("rtdebug handoff closed")
        return conn, self.NAME

    def getsockname(self) -> tuple[str, int]:
        return self.NAME

    def listen(self, backlog: int = 0) -> None:
        pass

    def settimeout(self, value: float | None) -> None:
        pass

    def close(self) -> None:
        self._queue.put(None)


def pump(src: socket.socket, dst: socket.socket, check: Callable[[bytes], None] | None = None) -> str | None:
    """Relay ``src`` to ``dst`` (a client and its end of the handoff) until either side ends; then both end.
    ``check`` sees each chunk before it is passed on; if it raises (``dapgate.NotDAP``), nothing of that
    chunk is sent, both ends close, and the reason is returned."""
    why = None
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if check is not None:
                try:
                    check(data)
                except ValueError as exc:  # NotDAP: junk never reaches pydevd
                    why = str(exc)
                    break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        close_both(src, dst)
    return why


def close_both(*socks: socket.socket) -> None:
    """Shut both directions of each socket (the relay's other pump sees it at once)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def listen_via_handoff(handoff: Handoff) -> None:
    """``debugpy.listen`` with in-process adapter, pydevd's server socket being ``handoff``."""
    import debugpy
    from debugpy.server import api  # noqa: F401  (imports the vendored pydevd)

    pydevd = sys.modules["pydevd"]
    _skip_environment_log()
    original = getattr(pydevd, "create_server_socket", None)
    if original is None:
        raise RuntimeError("this debugpy's pydevd has no create_server_socket; rtdebug needs debugpy 1.8")
    setattr(pydevd, "create_server_socket", lambda host, port: handoff)  # noqa: B010  (untyped module)
    try:
        debugpy.listen(("127.0.0.1", 0), in_process_debug_adapter=True)
    finally:
        setattr(pydevd, "create_server_socket", original)  # noqa: B010
    py_db = pydevd.get_global_debugger()
    thread = getattr(py_db, "_waiting_for_connection_thread", None)
    if getattr(thread, "_server_socket", None) is not handoff:
        if thread is not None:
            thread.do_kill_pydev_thread()  # closes whatever it listens on
        raise RuntimeError("pydevd did not take rtdebug's socket handoff (unsupported debugpy version)")


def _skip_environment_log() -> None:
    """debugpy's first ``listen`` lists every installed distribution's metadata (~2.5 of 2.6 s,
    profiled) for a log that only ``DEBUGPY_LOG_DIR`` creates. Without one, skip it."""
    from debugpy.common import log
    from debugpy.server import api

    ensure = getattr(api, "ensure_logging", None)
    if log.log_dir is None and ensure is not None and hasattr(ensure, "ensured"):
        ensure.ensured = True
