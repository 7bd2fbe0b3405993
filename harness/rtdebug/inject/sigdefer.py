"""SIGINT, SIGHUP and SIGTERM, held back while rtdebug is inside another process (``rtdebug adopt``, detach).

Why: while ``rtdebug.inject.ptrace`` runs a call in a rank's thread, that thread's registers are ours and
its return address is 0. A shell that dies then (Ctrl-C, a closed terminal, ``kill``) detaches it by dying,
and the rank returns to address 0 and dies by SIGSEGV. So for the length of the work, these signals only
record themselves and set ``stop``: whoever holds a thread checks ``stop`` between two calls (each call is
short: see ``rtdebug.inject.ptrace_call``), puts the thread back and detaches, as a debugger does; the
command then undoes what it had done and exits 128 + the signal with one line. A signal that the shell
ignores (``nohup``) stays ignored. SIGKILL cannot be held back: nothing here helps against it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rtdebug.common.errors import HarnessError

SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


class Interrupted(HarnessError):
    """A held-back signal came: the work stopped where it safely could. ``answers``: what had been done."""

    def __init__(self, signum: int, answers: dict[int, dict[str, Any]] | None = None) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}", 128 + signum)
        self.signum = signum
        self.answers = answers or {}


class Guard:
    """The signal that came (0: none) and the event every thread that holds a process checks."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signum = 0

    def _handler(self, signum: int, _frame: Any) -> None:
        if not self.signum:
            self.signum = signum
        self.stop.set()

    def check(self) -> None:
        if self.signum:
            raise Interrupted(self.signum)


_active: Guard | None = None


def active() -> Guard | None:
    return _active


@contextmanager
def deferred() -> Iterator[Guard]:
    """Hold SIGINT/SIGHUP/SIGTERM back for the block (see the module docstring); nested blocks share the
    outer one's guard. Only the main thread can install handlers: elsewhere the guard is never set."""
    global _active
    if _active is not None:
        yield _active
        return
    guard = Guard()
    old: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                if signal.getsignal(s) is not signal.SIG_IGN:
                    old[s] = signal.signal(s, guard._handler)
        _active = guard
        yield guard
    finally:
        _active = None
        for signum, handler in old.items():
            signal.signal(signum, handler)
