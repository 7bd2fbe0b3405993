"""The one-shot stop at a collective: suspend the rank's thread in the debugger, in the user's frame.

``collrec.stop_at_next()`` arms it; the wrapped collective calls ``suspend`` before torch's function
runs, so every rank that "runs to its next collective" stops with its op and seq already recorded,
and none has blocked yet. Imported only when that stop fires (pydevd is loaded by then), so a rank
that never asks for it never loads this.
"""

from __future__ import annotations

import sys
from typing import Any


def suspend(frame: Any) -> None:
    """Suspend this thread in the debugger at ``frame``'s current line (the collective's), if one is attached."""
    from rtdebug.rank import runtime

    endpoint = runtime.endpoint
    if "pydevd" not in sys.modules or endpoint is None or not endpoint.client_connected():
        return
    import threading

    import pydevd
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

    py_db = pydevd.get_global_debugger()
    if py_db is None:
        return
    if runtime.allstop is not None:
        runtime.allstop.quiet = True  # each rank runs to its own collective: this stop pauses no other rank
    thread = threading.current_thread()
    info = set_additional_thread_info(thread)
    py_db.set_trace_for_frame_and_parents(thread.ident, frame)
    py_db.set_suspend(thread, CMD_SET_BREAK)
    # as if inside pydevd's own tracer: code the client evaluates while stopped must not suspend again
    info.is_tracing += 1
    try:
        py_db.do_wait_suspend(thread, frame, "line", None)
    finally:
        info.is_tracing -= 1
