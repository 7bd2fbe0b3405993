"""Processes a driver starts: killed with their trees or process groups, checked for life.

psutil is imported where it is used: the GPU check runs these helpers on a machine's bare Python."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support.sigs import default_dispositions


def kill_tree(proc: subprocess.Popen) -> None:
    """``proc`` and every descendant, killed and reaped: a test never leaves a process behind."""
    import psutil

    try:
        procs = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.kill()
    proc.wait()


def end_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM the process group ``proc`` leads (started with ``start_new_session``), SIGKILL what is left of it
    after ``grace`` seconds, and reap ``proc``; its group's other members (an sshd's connection children) too."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; the rest of its group too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break
    proc.poll()


def alive(pids: list[int]) -> list[int]:
    import psutil

    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=default_dispositions)
    p.wait()
    return p.pid
