"""What the rank's debugger is doing, as its registry entry's ``debug`` field says it (``rtdebug ps``, ``ps --json``).

One of: ``running``; ``stopped`` (at ``file:line``, with the DAP stop reason: ``breakpoint``, ``exception``,
``step``, ``pause``...); ``paused`` (by all-stop: another rank, ``by``, stopped; at ``file:line``); ``pausing``
(a peer stopped and this rank is not held yet: it is in a native call, C++, at the user's ``file:line``, a
collective most likely, and is held when it returns: pydevd's pause with a client, ``rtdebug.rank.nativehold``
with none). Written by ``rtdebug.rank.allstop`` from what the rank sees itself (pydevd's ``stopped`` and
``continued`` events through the relay, the collective wrapper, the board), so it is true whatever the client,
or with none.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from rtdebug.common import log
from rtdebug.common.paths import PACKAGE_DIR

STATE_SUSPEND = 2  # pydevd_constants.STATE_SUSPEND: a thread held in pydevd's do_wait_suspend
_THREADING = os.path.dirname(threading.__file__) + os.sep + "threading.py"


def _internal() -> tuple[str, ...]:
    dirs = [PACKAGE_DIR]
    debugpy = sys.modules.get("debugpy")
    if debugpy is not None and getattr(debugpy, "__file__", None):
        dirs.append(os.path.dirname(str(debugpy.__file__)) + os.sep)
    return tuple(dirs)


def user_frame(frame: Any) -> Any:
    """The innermost frame of ``frame``'s stack that is neither rtdebug's nor the debugger's, or None."""
    internal = _internal()
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(internal) and name != _THREADING and not name.startswith("<frozen"):
            return frame
        frame = frame.f_back
    return None


def where_suspended() -> tuple[str, int] | None:
    """Where the debugger holds this process: the user's line (outside torch) in its main thread if that one is
    suspended, else in the first suspended thread; None when none is (seen from a thread the debugger leaves
    alone)."""
    frames = sys._current_frames()
    main = threading.main_thread()
    for t in [main, *(t for t in threading.enumerate() if t is not main)]:
        info = getattr(t, "additional_info", None)
        if info is None or getattr(info, "pydev_state", None) != STATE_SUSPEND or t.ident is None:
            continue
        f = call_site(frames.get(t.ident))  # the user's line, as a justMyCode client's Call Stack shows it
        if f is not None:
            return f.f_code.co_filename, f.f_lineno
    return None


def at(frame: Any) -> tuple[str, int] | None:
    f = user_frame(frame)
    return None if f is None else (f.f_code.co_filename, f.f_lineno)


def call_site(frame: Any) -> Any:
    """The innermost frame of ``frame``'s stack outside rtdebug, the debugger and torch: the user's line that
    called into torch (``loss.backward()``), or None."""
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    libs = (os.path.dirname(str(torch_file)) + os.sep,) if torch_file else ()
    while frame is not None:
        frame = user_frame(frame)
        if frame is None or not frame.f_code.co_filename.startswith(libs):
            return frame
        frame = frame.f_back
    return None


def at_site(frame: Any) -> tuple[str, int] | None:
    f = call_site(frame)
    return None if f is None else (f.f_code.co_filename, f.f_lineno)


def record(
    rec: Any, state: str, reason: str | None = None, where: tuple[str, int] | None = None, by: int | None = None
) -> None:
    """Write the ``debug`` field of ``rec`` (the rank's ``RankState``; never raises: the record must not break
    the debugger's threads)."""
    if rec is None:
        return
    debug = {
        "state": state,
        "reason": reason,
        "file": where[0] if where else None,
        "line": where[1] if where else None,
        "by": by,
        "since": time.time(),
    }
    try:
        rec.set(debug=debug)
    except Exception:
        log.swallowed("rank.debugstate: the debug state is recorded or not; it never fails the debugger")
