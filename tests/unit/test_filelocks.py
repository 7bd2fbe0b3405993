"""rtdebug.common.filelocks: a real second process holds the lock; a timeout says so; a killed holder leaves no lock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rtdebug.common import filelocks
from rtdebug.common.filelocks import LockTimeout, locked

HOLD = """
import sys, time
from rtdebug.common.filelocks import locked
with locked(sys.argv[1], 5):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


class Clock:
    """The lock's own clock, driven by its sleeps: how long it waited is counted, never measured."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s
        self.sleeps += 1


def test_a_held_lock_times_out_with_one_line_and_a_killed_holder_leaves_none(tmp_path, monkeypatch):
    path = tmp_path / ".lock"
    p = _holder(path)
    try:
        clock = Clock()
        with monkeypatch.context() as m, pytest.raises(LockTimeout, match="stayed locked by another process for 0.3 s"):
            m.setattr(filelocks, "time", clock)
            with locked(path, 0.3):
                pass
        # it tried all through its timeout, one poll at a time, before it gave up
        assert clock.now >= 0.3 - 1e-9 and clock.sleeps >= round(0.3 / filelocks.POLL_S), vars(clock)
    finally:
        p.kill()
        p.wait()
    with locked(path, 2):  # SIGKILL released it: no stale lock file to clean up
        pass


def test_released_on_exit_and_on_error(tmp_path):
    path = tmp_path / ".lock"
    with pytest.raises(RuntimeError):
        with locked(path, 1):
            raise RuntimeError("inside")
    p = _holder(path)  # another process gets it at once
    p.kill()
    p.wait()
