"""Processes a test starts: killed with their trees, checked for life."""

from __future__ import annotations

import subprocess
import sys

import psutil

from support.sigs import default_dispositions


def kill_tree(proc: subprocess.Popen) -> None:
    """``proc`` and every descendant, killed and reaped: a test never leaves a process behind."""
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


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=default_dispositions)
    p.wait()
    return p.pid
