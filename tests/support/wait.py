"""A wait for a state is a wait on that state, with a deadline: never a bare sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def until(
    get: Callable[[], T],
    timeout: float,
    what: str,
    *,
    ok: Callable[[T], object] | None = None,
    every: float = 0.05,
    context: Callable[[], object] | None = None,
) -> T:
    """Poll ``get`` until its value is true (or satisfies ``ok``, where given), and return that value. Past
    ``timeout`` seconds raise an AssertionError naming ``what`` (the state waited for) and the last value, then
    ``context()`` if given (a log's tail, say)."""
    deadline = time.monotonic() + timeout
    while True:
        last = get()
        if ok(last) if ok is not None else last:
            return last
        if time.monotonic() >= deadline:
            msg = f"{what}: not within {timeout:g} s; last value {_short(last)}"
            if context is not None:
                msg += f"\n{context()}"
            raise AssertionError(msg)
        time.sleep(every)


def _short(value: object, limit: int = 4000) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def stays(pred: Callable[[], object], seconds: float, what: str, *, every: float = 0.05) -> None:
    """A state that must hold for a whole window (nothing happens that must not): ``pred`` is checked through
    ``seconds`` and the first time it is false an AssertionError names ``what`` and the value. The window is the
    test's own choice, never a guess at how long something takes: what it waits for is that nothing changes."""
    deadline = time.monotonic() + seconds
    while True:
        last = pred()
        if not last:
            raise AssertionError(f"{what}: no longer so; value {_short(last)}")
        if time.monotonic() >= deadline:
            return
        time.sleep(every)


def finishes(fn: Callable[[], T], timeout: float, what: str) -> T:
    """``fn()``'s result (or its exception, raised here) once it returns: a call that must not hang. Run in a
    daemon thread; still running after ``timeout`` seconds, an AssertionError names ``what``. ``timeout`` is a
    deadline for a hang, not a measure of speed (bench/ measures durations)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True, name=f"finishes: {what}")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{what}: still running after {timeout:g} s")
    if "error" in out:
        raise out["error"]
    return out["value"]
