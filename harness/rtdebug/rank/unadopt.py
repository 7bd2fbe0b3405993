"""Undoing an adoption in a rank, piece by piece (``rtdebug.rank.adopted.detach``): nothing of rtdebug stays.

What a detach once left in a rank that a client had attached to and left: an fd on ``coll-<rank>.bin`` (the
record's mapping), pydevd's end of the client's socketpair (its reader and writer threads had ended, their
socket was never closed; with two clients one after the other, the first one's too) and the access check's
netlink socket. Each is closed here. A client still attached has its relay ended and waited for (bounded),
with the endpoint's state reports cut off first, so that nothing writes ``ready`` over the entry's final
``detached``.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from typing import Any

from rtdebug.common import log

RELAY_END_S = 2.0  # how long detach waits for a client's relay to end once its sockets are shut
PYDEVD_END_S = 1.0  # and for each of pydevd's reader and writer threads


def shut(endpoint: Any) -> None:
    """Close the endpoint's listening socket; its accept thread ends."""
    endpoint.close()


def end_clients(endpoint: Any) -> None:
    """End every client's relay (its connection closes) and wait, bounded, until each relay has closed its
    sockets; the endpoint reports no state from now on."""
    endpoint.end_clients(RELAY_END_S)


def stop_debugger(endpoint: Any) -> None:
    """If a client ever attached, debugpy runs here: stop its tracing and its threads, close its sockets."""
    if endpoint.lazy:
        return
    pydevd = sys.modules.get("pydevd")
    py_db = pydevd.get_global_debugger() if pydevd is not None else None
    waiting = getattr(py_db, "_waiting_for_connection_thread", None)
    try:
        if waiting is not None:
            waiting.do_kill_pydev_thread()  # pydevd's accept loop on our handoff: closed, it ends
        endpoint.close_handoff()
        if pydevd is not None:
            pydevd.stoptrace()  # tracing off in every thread, pydevd's reader/writer threads end
        _close_pydevd_sockets(py_db)
        endpoint.release_handoff()  # and the ends of earlier clients, which pydevd no longer names
        api = sys.modules.get("debugpy.server.api")
        if api is not None:  # or a later adoption's first client finds debugpy.listen "already called"
            api.listen.called = False
    except Exception:
        log.swallowed("rank.unadopt: stop_debugger: going on")


def _close_pydevd_sockets(py_db: Any) -> None:
    """pydevd's reader and writer keep their (ended) client's socket: shut it, let them end, close it."""
    for name in ("writer", "reader"):
        t = getattr(py_db, name, None)
        sock = getattr(t, "sock", None)
        if not isinstance(sock, socket.socket):
            continue
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread still blocked on it
        if isinstance(t, threading.Thread) and t.is_alive() and t is not threading.current_thread():
            t.join(PYDEVD_END_S)
        sock.close()


def release(stacks: dict[str, Any] | None) -> None:
    """The dump thread and its FIFO, torch's own collectives back (and the record's file let go), the
    access check's netlink socket: what the rank opened besides the endpoint."""
    from rtdebug.common import sockdiag
    from rtdebug.rank.collectives import recorder as collrec
    from rtdebug.rank.stacks import dump

    if stacks is not None:
        dump.disarm()
    collrec.disarm()
    sockdiag.shared().close()
