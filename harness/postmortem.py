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
    import pydevd
    from _pydevd_bundle.pydevd_breakpoints import stop_on_unhandled_exception

    py_db = pydevd.get_global_debugger()
    if py_db is None or tb is None:
        return False
    if not py_db.break_on_uncaught_exceptions:
        # The client did not enable "Uncaught Exceptions"; post-mortem was asked for explicitly.
        py_db.add_break_on_exception(
            "BaseException", condition=None, expression=None, notify_on_handled_exceptions=False,
            notify_on_unhandled_exceptions=True, notify_on_user_unhandled_exceptions=False,
            notify_on_first_raise_only=False, ignore_libraries=False,
        )
        py_db.on_breakpoints_changed()
    thread = threading.current_thread()
    info = py_db.set_additional_thread_info(thread)
    stop_on_unhandled_exception(py_db, thread, info, (exc_type, exc, tb))
    return True


def handle(endpoint, exc: BaseException, wait_s: float, rank: int) -> None:
    """Called with the exception a rank's script raised; returns when the user is done."""
    if endpoint is None:
        return
    if not endpoint.client_connected():
        print(
            f"rtdebug: rank {rank} failed; post-mortem: attach to {endpoint.host}:{endpoint.port} "
            f"within {wait_s:g}s to inspect it",
            file=sys.stderr, flush=True,
        )
        if not endpoint.wait_for_client(wait_s):
            print(f"rtdebug: rank {rank}: no debugger attached, exiting", file=sys.stderr, flush=True)
            return
    _stop_at_raise(type(exc), exc, exc.__traceback__)
