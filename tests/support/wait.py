"""A wait for a state is a wait on that state, with a deadline: never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(
    pred: Callable[[], T],
    timeout: float,
    what: str,
    *,
    every: float = 0.05,
    context: Callable[[], object] | None = None,
) -> T:
    """Poll ``pred`` until it returns something true, and return that. Past ``timeout`` seconds raise an
    AssertionError naming ``what`` (the state waited for) and ``pred``'s last value, then ``context()`` if given
    (a log's tail, say)."""
    deadline = time.monotonic() + timeout
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            msg = f"{what}: not within {timeout:g} s; last value {last!r}"
            if context is not None:
                msg += f"\n{context()}"
            raise AssertionError(msg)
        time.sleep(every)
