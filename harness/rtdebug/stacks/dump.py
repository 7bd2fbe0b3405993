"""Rank side of ``rtdebug stacks``: faulthandler writes every thread's Python stack at signal time.

``arm`` registers faulthandler on ``SIGNAL`` to write all threads' stacks to
``<registry>/<session>/stacks-<rank>.txt``. The dump is C-level and async-signal-safe, so it works
while the main thread is blocked inside a C++ collective (GIL released) or suspended at a
breakpoint, needs no ptrace rights, and costs nothing until the signal comes. Stdlib only: it is
armed on every rank's start path.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

# A real-time signal, not SIGUSR1/2: schedulers and frameworks use those (SLURM's --signal, preemption
# checkpoint handlers), and the launcher's hang watch signals ranks periodically.
SIGNAL: int = int(signal.SIGRTMIN) + 6 if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)
_armed: dict[str, Any] = {}


def dump_file(rank: int) -> str:
    """The name of rank ``rank``'s dump file in its session directory (the only name a requester truncates)."""
    return f"stacks-{rank}.txt"


def arm(session_dir: Path, rank: int) -> dict[str, Any] | None:
    """Register the dump in this process; returns the rank entry's ``stacks`` field (None if taken)."""
    if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
        return None  # the program (or an embedder) already owns the signal
    path = Path(session_dir) / dump_file(rank)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    except OSError:
        return None
    if _armed.get("fd") is not None:
        faulthandler.unregister(SIGNAL)
        os.close(_armed["fd"])
    faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)
    f = sys._getframe()
    while f.f_back is not None:
        f = f.f_back
    _armed.update(fd=fd)
    return {
        "signal": int(SIGNAL),
        "file": path.name,
        "main_thread": hex(threading.main_thread().ident or 0),
        "bottom": [f.f_code.co_filename, f.f_code.co_name],
    }
