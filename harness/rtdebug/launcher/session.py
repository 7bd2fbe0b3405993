"""A session's life in its launcher, the same for ``rtdebug torchrun`` and ``rtdebug run``.

``open`` reserves the session's ports and writes its entry (under the registry lock); ``signals``
routes SIGINT/SIGTERM/SIGHUP to the launcher's own handler while the job runs; ``close`` records how
it ended -- ``stopped`` when a signal asked for it, else ``exited``/``failed`` by the exit code -- and
marks the ranks that could not record their own end (stopped with the job, killed with it).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rtdebug.registry.entry import LIVE_RANK_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import reserve_session

Handler = Callable[[int, Any], None]


class SessionRun:
    def __init__(self, registry: Registry, entry: dict[str, Any]) -> None:
        self.registry, self.entry = registry, entry
        self.session_id: str = entry["session_id"]
        self.stopping = threading.Event()  # a signal asked the session to stop
        self.closing = False  # close() has begun: a signal handler must not start it again
        self.state: str | None = None  # how it ended, once closed

    def open(self) -> None:
        """Reserve the ports and write the entry; raises (one line) when another session holds a port."""
        self.registry.ensure()
        reserve_session(self.registry, self.entry)

    def update(self, **fields: Any) -> None:
        self.registry.update_session(self.session_id, **fields)

    @contextmanager
    def signals(self, handler: Handler, signums: tuple[int, ...]) -> Iterator[None]:
        """``handler`` for ``signums`` while inside (it runs after ``stopping`` is set); the old ones after."""

        def on_signal(signum: int, frame: Any) -> None:
            self.stopping.set()
            handler(signum, frame)

        on_signal.rtdebug_session = True  # type: ignore[attr-defined]  # ours (see launcher.single)

        old = {s: signal.signal(s, on_signal) for s in signums}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def close(self, code: int) -> str:
        """Record the end (once); return the session's final state."""
        if self.state is not None:
            return self.state
        self.closing = True
        state = "stopped" if self.stopping.is_set() else ("exited" if code == 0 else "failed")
        now = time.time()
        for r in self.registry.ranks(self.session_id):
            if r["state"] in LIVE_RANK_STATES + ("orphaned",):
                failed = state == "failed"
                error = "ended by the job's teardown" if failed else r.get("error")
                self.registry.write_rank(dict(r, state="failed" if failed else "exited", updated_at=now, error=error))
        self.update(state=state, exit_code=code, ended_at=now)
        self.state = state
        return state
