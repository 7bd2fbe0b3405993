"""The stop: say why (registry entry, one line), wait for a client if none is attached, suspend in the
user's frame with the reason as the DAP ``stopped`` event's description.

Why a wait and no timeout: the ranks stop outside any collective (after ``backward()`` returned, or
before ``optimizer.step()``), so no process-group timeout runs while they wait; the job keeps its
evidence (the non-finite values, the weights before the step) until someone looks. Continue resumes the
rank; the conditions stay armed and fire again on the next event.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_pending: dict[int, tuple[str, bool]] = {}  # thread ident -> (description, take the focus)
_patched_factory: Any = None  # the pydevd command factory whose stopped event carries our description


def _describe_stops(py_db: Any) -> None:
    """Make pydevd's ``stopped`` event carry our description (once per debugger)."""
    global _patched_factory
    factory = py_db.cmd_factory
    if _patched_factory is factory:
        return
    original = factory.make_thread_suspend_single_notification
    from _pydevd_bundle.pydevd_net_command import NetCommand

    def make(py_db: Any, thread_id: Any, thread: Any, stop_reason: Any) -> Any:
        cmd = original(py_db, thread_id, thread, stop_reason)
        pending = _pending.pop(getattr(thread, "ident", None) or 0, None)
        as_dict = getattr(cmd, "as_dict", None)
        if pending is None or not isinstance(as_dict, dict) or not isinstance(as_dict.get("body"), dict):
            return cmd
        description, focus = pending
        body = dict(as_dict["body"], description=description, text=description, preserveFocusHint=not focus)
        out = {k: v for k, v in as_dict.items() if k not in ("pydevd_cmd_id", "seq")}
        return NetCommand(as_dict["pydevd_cmd_id"], 0, dict(out, body=body), is_json=True)

    factory.make_thread_suspend_single_notification = make
    _patched_factory = factory


def stop(kind: str, reason: str, frame: Any, origin: bool | None, step: int | None) -> None:
    """Stop this rank at ``frame`` for ``kind`` (``nonfinite``/``disagree``/``step``)."""
    from rtdebug.rank import runtime

    record, endpoint = runtime.record, runtime.endpoint
    rank = record.entry.get("rank", "?") if record is not None else "?"
    entry = {"kind": kind, "reason": reason, "origin": origin, "step": step}
    if record is not None:
        record.set(stop=entry)
    where = f"; attach: {endpoint.host}:{endpoint.port}" if endpoint is not None else ""
    print(f"rtdebug: rank {rank}: stopped ({kind}: {reason}){where}", file=sys.stderr, flush=True)
    try:
        if endpoint is None:
            return  # nothing to stop in (no endpoint: an unmanaged process); said above, and on we go
        if not endpoint.client_connected():
            endpoint.wait_for_client()
        suspend(frame, f"rtdebug --stop-on {kind}: {reason}", focus=origin is not False)
    finally:
        if record is not None:
            record.set(stop=None)


def suspend(frame: Any, description: str, focus: bool) -> None:
    """Suspend this thread at ``frame``'s line, the stop described as ``description``."""
    if "pydevd" not in sys.modules:
        return
    import pydevd
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

    py_db = pydevd.get_global_debugger()
    if py_db is None:
        return
    _describe_stops(py_db)
    thread = threading.current_thread()
    info = set_additional_thread_info(thread)
    _pending[thread.ident or 0] = (description[:500], focus)
    py_db.set_trace_for_frame_and_parents(thread.ident, frame)
    py_db.set_suspend(thread, CMD_SET_BREAK)
    info.is_tracing += 1  # as inside pydevd's tracer: what the client evaluates here must not suspend again
    try:
        py_db.do_wait_suspend(thread, frame, "line", None)
    finally:
        info.is_tracing -= 1
        _pending.pop(thread.ident or 0, None)
