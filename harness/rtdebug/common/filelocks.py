"""An exclusive lock on a file, with a timeout: ``fcntl.flock`` and nothing else.

A flock belongs to the open file, so it is released when its holder dies (no stale
lock to clean up after a SIGKILL), and ``fcntl`` is built in: taking the registry
lock costs a launcher no import on its way to the ranks.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

POLL_S = 0.01


class LockTimeout(OSError):
    """Another process held the lock for the whole timeout."""


@contextmanager
def locked(path: str | os.PathLike[str], timeout: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{os.fspath(path)} stayed locked by another process for {timeout:g} s") from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock
