"""Refusals are reported at most once a second: a flood must cost the rank neither output nor registry writes.

The first refusal after a quiet second is reported at once (its line on stderr, ``refused_count`` in the
registry). Later ones within the same second are only counted; one timer (a thread hidden from the
debugger, started at most once a second) reports them together when the second is over: how many, and
the latest one's line. So a rank prints at most one refusal line per second, and its registry entry is at
most a second behind the true count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

INTERVAL_S = 1.0


class RefusalLog:
    """Rate-limits ``report(text)`` to once per ``interval`` s; nothing counted is ever lost."""

    def __init__(
        self,
        report: Callable[[str], None],
        interval: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.report = report
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._quiet_until = float("-inf")  # no report before this time
        self._held = 0  # refusals counted since the last report
        self._latest: Callable[[], str] = str
        self._timer: threading.Timer | None = None

    def add(self, line: Callable[[], str]) -> None:
        """One refusal; ``line()`` makes its text, only when it is reported."""
        with self._lock:
            now = self.clock()
            if self._held or now < self._quiet_until:
                self._held += 1
                self._latest = line
                self._arm(self._quiet_until - now)
                return
            self._quiet_until = now + self.interval
        self.report(line())

    def _arm(self, delay: float) -> None:
        if self._timer is None:
            t = threading.Timer(max(delay, 0.0), self.flush)
            t.daemon = True
            t.pydev_do_not_trace = True  # type: ignore[attr-defined]
            t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
            t.name = "rtdebug-refusals"
            self._timer = t
            t.start()

    def flush(self) -> None:
        """Report what was held back (the timer calls this once its second is over)."""
        with self._lock:
            self._timer = None
            held, self._held = self._held, 0
            if held == 0:
                return
            latest = self._latest()
            self._quiet_until = self.clock() + self.interval
        self.report(f"{held} more refused since the last line, the latest: {latest}")
