"""rtdebug.common.procinfo: /proc-read create times agree with psutil's; a zombie, a gone pid or a reused pid
is not alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from rtdebug.common.procinfo import is_alive, process_create_time


def test_create_time_without_psutil_agrees_with_psutil():
    """Ranks read their own start time from /proc (no psutil on their start path); `ps` and `stop` may
    compare it with psutil's: both must agree, for live processes of all kinds."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        checked = 0
        for pid in [1, os.getpid(), child.pid, *[p.pid for p in psutil.process_iter()][:40]]:
            try:
                want = psutil.Process(pid).create_time()
            except psutil.Error:
                continue
            assert process_create_time(pid) == pytest.approx(want, abs=1e-6), pid
            checked += 1
        assert checked >= 3
    finally:
        child.kill()
        child.wait()
    assert process_create_time(child.pid) is None


def test_zombie_gone_and_reused_pids_are_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ct = process_create_time(child.pid)
    assert ct is not None
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not yet reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert process_create_time(child.pid) == pytest.approx(ct, abs=1e-6)  # a zombie still has its entry
    assert not is_alive(child.pid, ct)
    child.wait()
    assert not is_alive(child.pid, ct)  # gone
    me = process_create_time(os.getpid())
    assert me is not None and is_alive(os.getpid(), me)
    assert not is_alive(os.getpid(), me - 100)  # same pid, another start time: a reused pid
