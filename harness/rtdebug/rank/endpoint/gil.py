"""A short GIL switch interval for a few seconds after a debug client connects.

A rank's main thread usually runs pure Python and holds the GIL; every thread that
serves the client (the relay, pydevd's reader and writer) gives the GIL up on each
socket call and then waits a whole switch interval (5 ms) to get it back. A DAP
handshake is hundreds of such round trips, so attaching to a busy rank took
~0.1-0.5 s of pure waiting per rank. While ``boost(s)`` lasts the interval is 0.2 ms;
afterwards it is restored to what it was. The cost is only more frequent switches
between threads that already compete for the GIL, for those few seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rtdebug.common.threads import hidden_thread

FAST_S = 0.0002

_lock = threading.Lock()
_until = 0.0
_holders = 0
_saved: float | None = None


@contextmanager
def boosted(after_s: float = 0.0) -> Iterator[None]:
    """The short interval while inside, and ``after_s`` seconds after."""
    global _holders
    with _lock:
        _holders += 1
    boost(after_s)
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
        boost(after_s)


def boost(seconds: float) -> None:
    """Use the short interval for at least ``seconds`` from now (the only writer of the interval)."""
    global _until, _saved
    with _lock:
        _until = max(_until, time.monotonic() + seconds)
        if _saved is not None:
            return
        _saved = sys.getswitchinterval()
        sys.setswitchinterval(min(_saved, FAST_S))
    hidden_thread(_expire, "rtdebug-gil-boost")


def end() -> None:
    """Nothing left to hurry for (the last client left): restore the interval within 0.1 s."""
    global _until
    with _lock:
        _until = 0.0


def _expire() -> None:
    global _saved
    while True:
        with _lock:
            left = max(_until - time.monotonic(), 0.05 if _holders else 0.0)
            if left <= 0:
                if _saved is not None:
                    sys.setswitchinterval(_saved)
                _saved = None
                return
        time.sleep(min(left, 0.1))
