"""Post-mortem: keep a failed rank alive and stop the debugger at the raise site.

With a client attached, pydevd's own unhandled-exception stop shows the
traceback frames, so the user lands where the exception was raised. With no
client, the rank waits (bounded) for one and then does the same.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType


def _stop_at_raise(exc_type, exc: BaseException, tb: TracebackType | None) -> bool:
    """Stop on the deepest user frame of ``tb`` (pdb.post_mortem-like), whatever the client's filters."""
    import pydevd

    py_db = pydevd.get_global_debugger()
    if py_db is None or tb is None:
        return False
    if hasattr(py_db, "trigger_exception_handler"):  # debugpy >= 1.8.19
        py_db.trigger_exception_handler((exc_type, exc, tb), as_uncaught=False)
        return True
    user_frame = None
    while tb is not None:
        if py_db.get_file_type(tb.tb_frame) != py_db.PYDEV_FILE:
            user_frame = tb.tb_frame
        tb = tb.tb_next
    if user_frame is None:
        return False
    thread = threading.current_thread()
    info = py_db.set_additional_thread_info(thread)
    info.is_tracing += 1  # no re-entrant tracing of our own wait loop while stopped
    try:
        py_db.do_stop_on_unhandled_exception(thread, user_frame, None, (exc_type, exc, exc.__traceback__))
    finally:
        info.is_tracing -= 1
    return True


def handle(endpoint, exc: BaseException, wait_s: float, rank: int) -> None:
    """Called with the exception a rank's script raised; returns when the user is done."""
    if endpoint is None:
        return
    if not endpoint.client_connected():
        print(
            f"rtdebug: rank {rank} failed; post-mortem: attach to {endpoint.host}:{endpoint.port} "
            f"within {wait_s:g}s to inspect it",
            file=sys.stderr,
            flush=True,
        )
        if not endpoint.wait_for_client(wait_s):
            print(f"rtdebug: rank {rank}: no debugger attached, exiting", file=sys.stderr, flush=True)
            return
    exc = raise_site(exc)
    _stop_at_raise(type(exc), exc, exc.__traceback__)


def raise_site(exc: BaseException) -> BaseException:
    """The exception whose traceback holds the raise site: the ``WorkerGroupError`` local mode's ``fit()``
    raises as a cluster's does (``rtdebug.rank.localmode``) stands for the train function's own exception."""
    cause = exc.__cause__
    if getattr(exc, "worker_failures", None) and cause is not None and cause.__traceback__ is not None:
        return cause
    return exc
