"""What the rank's half of ``rtdebug stacks`` (``rtdebug.rank.stacks``) and the requester's share: the names
of a rank's stacks files in its session directory, the signal of the fallback dump, and the size of a dump.

Stdlib only: the rank's dump thread imports it on every rank's start path.
"""

from __future__ import annotations

import signal

# A real-time signal, not SIGUSR1/2: schedulers and frameworks use those (SLURM's --signal, preemption
# checkpoint handlers).
SIGNAL: int = int(signal.SIGRTMIN) + 6 if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)
MAX_TEXT = 256 << 10  # bytes of text a rank sends (faulthandler caps threads and frames; this caps the bytes)


def dump_file(rank: int) -> str:
    """The signal fallback's file in the session directory (the only name a requester truncates)."""
    return f"stacks-{rank}.txt"


def request_file(rank: int) -> str:
    """The FIFO a requester writes a nonce line into."""
    return f"stacks-{rank}.req"


def answer_file(rank: int) -> str:
    """The dump thread's answer (JSON), renamed into place whole."""
    return f"stacks-{rank}.json"
