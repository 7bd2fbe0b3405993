"""pydevd's tracing off while no client is attached, back on before the next one talks.

On Python < 3.12 pydevd debugs through ``sys.settrace``: once debugpy has started,
every thread keeps pydevd's trace function, and a disconnect (even one that clears
all breakpoints) leaves it there, so a rank ran at ~0.6x plain speed for the rest
of its life after its first client had gone. ``off()`` undoes what pydevd's start
did, in every thread, without needing those threads to run our code first:

- each thread's *global* trace function (``tstate->c_tracefunc``) is swapped, via
  pydevd's own helper library, for ``_untrace``, which on that thread's next call
  event calls ``sys.settrace(None)`` there -- after that, the thread runs untraced;
- the per-frame ``f_trace`` of every live frame is cleared (a loop that makes no
  calls gets no more line events dispatched into pydevd);
- ``threading.settrace`` and pydevd's thread-start patch are undone, so threads
  started while detached are untraced too;
- pydevd's polling threads (command, check-alive, writer) wake every 2 s
  instead of 0.1-0.2 s (``_slow_polls``).

``on()`` redoes pydevd's own start sequence (patch_threads, enable_tracing on all
threads, set_tracing_for_untraced_contexts) before the next client's first byte
reaches pydevd, so its breakpoints bind as on a first attach. Threads pydevd or the
rtdebug own (``pydev_do_not_trace``) are never touched. 3.12+ debug through
``sys.monitoring``, whose cost with no breakpoints is small: left as they are.
"""

from __future__ import annotations

import queue
import sys
import threading
from types import FrameType
from typing import Any

from rtdebug.common import log

_off = False
DETACHED_POLL_S = 2.0  # pydevd's command / check-alive threads poll at 0.2 s: slower while nobody is attached
_poll_s: float | None = None


def _uses_settrace() -> bool:
    mod = sys.modules.get("_pydevd_bundle.pydevd_constants")
    return mod is not None and not getattr(mod, "PYDEVD_USE_SYS_MONITORING", False)


def _py_db():
    pydevd = sys.modules.get("pydevd")
    return pydevd.get_global_debugger() if pydevd is not None else None


def _untrace(frame, event, arg):
    """Installed as a thread's trace function by ``off()``: remove tracing from this thread."""
    sys.modules["pydevd_tracing"].SetTrace(None)  # the real sys.settrace (pydevd wraps the public one)
    return None


def _ours() -> set[int | None]:
    return {
        t.ident
        for t in threading.enumerate()
        if getattr(t, "pydev_do_not_trace", False) or getattr(t, "is_pydev_daemon_thread", False)
    }


def off() -> bool:
    """Stop tracing every thread (see module docstring); True if tracing was switched off."""
    global _off
    if _off or _py_db() is None or not _uses_settrace():
        return False
    # pydevd's own modules, loaded since debugpy started (not imported here: they are untyped)
    pydevd_tracing = sys.modules["pydevd_tracing"]
    sys.modules["_pydev_bundle.pydev_monkey"].undo_patch_thread_modules()
    threading.settrace(None)  # type: ignore[arg-type,unused-ignore]  # None clears it
    skip = _ours()
    frames = {i: f for i, f in sys._current_frames().items() if i not in skip}
    idents = list(frames)
    for top in frames.values():
        f: FrameType | None = top
        while f is not None:
            f.f_trace = None
            f = f.f_back
    frames.clear()  # no frame references kept alive
    if idents:
        pydevd_tracing.set_trace_to_threads(_untrace, thread_idents=idents, create_dummy_thread=False)
    _slow_polls(True)
    _off = True
    return True


def _slow_polls(slow: bool) -> None:
    """Each wake of pydevd's polling threads takes the GIL from the main thread, which on a
    loaded machine costs it a reschedule; nothing needs them while no client is attached."""
    global _poll_s
    pydevd: Any = sys.modules["pydevd"]  # untyped
    if not isinstance(getattr(pydevd, "TIMEOUT_SLOW", None), (int, float)):
        return
    if slow and _poll_s is None:
        _poll_s, pydevd.TIMEOUT_SLOW = pydevd.TIMEOUT_SLOW, max(pydevd.TIMEOUT_SLOW, DETACHED_POLL_S)
        writer = getattr(_py_db(), "writer", None)
        q = getattr(writer, "_cmd_queue", None)
        if type(q) is queue.Queue:  # its writer polls every 0.1 s; a message still wakes it at once
            q.__class__ = _SlowPollQueue
    elif not slow and _poll_s is not None:
        pydevd.TIMEOUT_SLOW, _poll_s = _poll_s, None


class _SlowPollQueue(queue.Queue):
    """pydevd's writer queue while detached: an empty poll waits 2 s instead of 0.1 s."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is not None and _poll_s is not None:
            timeout = max(timeout, DETACHED_POLL_S)
        return super().get(block, timeout)


def on() -> bool:
    """Trace every thread again as pydevd's start does; True if tracing had been off."""
    global _off
    py_db = _py_db()
    if not _off or py_db is None:
        return False
    _off = False
    _slow_polls(False)
    py_db.patch_threads()
    py_db.enable_tracing(py_db.trace_dispatch, apply_to_all_threads=True)
    py_db.set_tracing_for_untraced_contexts()
    return True


def client_gone() -> None:
    """The last client is gone: resume and clear breakpoints as a DAP ``disconnect`` would,
    then switch tracing off (``off()``). Runs in the relay thread: never raises.

    pydevd keeps threads suspended when its client socket closes without a ``disconnect``
    (a crashed VS Code, a reset connection) until the next client comes, so a rank stopped
    at a breakpoint would hang its job forever. After a clean disconnect that part is a no-op.
    """
    py_db = _py_db()
    if py_db is None:
        return
    try:
        from _pydevd_bundle.pydevd_api import PyDevdAPI

        PyDevdAPI().request_disconnect(py_db, resume_threads=True)
    except Exception as exc:  # never let the relay thread die on pydevd internals
        log.swallowed("rank.tracing: never let the relay thread die on pydevd internals")
        print(f"rtdebug: could not resume after the client left: {exc}", file=sys.stderr)
    off_quietly()


def off_quietly() -> None:
    """``off()`` that reports a failure on stderr instead of raising."""
    try:
        off()
    except Exception as exc:  # a pydevd change must cost speed, never the rank or the relay thread
        log.swallowed("rank.tracing: a pydevd change must cost speed, never the rank or the relay thread")
        print(f"rtdebug: could not switch debugger tracing off: {exc}", file=sys.stderr)
