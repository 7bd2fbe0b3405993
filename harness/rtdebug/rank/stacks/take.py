"""This process's stacks, taken as Python by a thread that holds the GIL.

Why not ``faulthandler`` at signal time: CPython's C-level dump walks the interpreter's thread list
without the GIL, so a thread that ends meanwhile frees the state it is reading. A job whose code starts
and ends threads all the time (a pool per step, per-batch prefetch threads) died by SIGSEGV after 3 to
32 such signals on 3.11-3.13. Here the calling thread holds the GIL, so no thread state can go away
while ``sys._current_frames()`` copies them, and the thread names come along.

The text is faulthandler's format (what ``rtdebug.stacks.group.parse_dump`` reads, so both sources
parse alike), with the thread's name after its id: ``Thread 0x00007f.. [name] (most recent call
first):``. The main thread comes last, as faulthandler lists it. Bounded as faulthandler is: 100
threads, 100 frames each (``...`` marks a cut), and ``MAX_TEXT`` bytes in all. Stdlib only.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from rtdebug.registry.schema import RankStacks
from rtdebug.stacks.contract import MAX_TEXT

MAX_THREADS = 100
MAX_FRAMES = 100


def _name(ident: int, names: dict[int, str]) -> str:
    """The thread's name, safe to print inside one line (no brackets, no control characters)."""
    raw = names.get(ident, "?")[:64]
    return "".join(c if c.isprintable() and c not in "[]" else "?" for c in raw)


def _thread_lines(head: str, frame: Any) -> list[str]:
    lines = [head]
    depth = 0
    while frame is not None:
        if depth == MAX_FRAMES:
            lines.append("  ...")
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno or "???"} in {code.co_name}')
        frame = frame.f_back
        depth += 1
    return lines


def text(main_ident: int | None = None) -> str:
    """Every thread's stack now, innermost frame first, the calling thread marked ``Current thread``."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
    main = main_ident if main_ident is not None else threading.main_thread().ident
    me = threading.get_ident()
    order = sorted((i for i in frames if i != main), reverse=True)[: MAX_THREADS - 1]
    if main in frames:
        order.append(main)  # last, as faulthandler writes the oldest thread
    lines: list[str] = []
    for ident in order:
        kind = "Current thread" if ident == me else "Thread"
        head = f"{kind} 0x{ident:016x} [{_name(ident, names)}] (most recent call first):"
        lines += _thread_lines(head, frames[ident])
        lines.append("")
    if len(frames) > MAX_THREADS:
        lines.append("...")
    del frames  # frames hold their locals alive: drop them before anything else runs
    out = "\n".join(lines) + "\n"
    raw = out.encode("utf-8", errors="replace")
    return out if len(raw) <= MAX_TEXT else raw[:MAX_TEXT].decode("utf-8", errors="ignore")


def take(main_ident: int | None = None) -> RankStacks:
    """``{"text", "main_id", "pid"}``: the dump a local or job-wide answer carries."""
    ident = main_ident if main_ident is not None else threading.main_thread().ident
    return {"text": text(ident), "main_id": hex(ident or 0), "pid": os.getpid()}


def with_flight(main_ident: int | None = None) -> dict[str, Any]:
    """This process's stacks now, taken as Python by the calling (watcher) thread with the GIL, and its
    Flight Recorder (``rtdebug.rank.stacks.flight``): what a job-wide answer carries (``rtdebug.stacks.wire``)."""
    from rtdebug.rank.stacks import flight

    return dict(take(main_ident), flight=flight.read())
