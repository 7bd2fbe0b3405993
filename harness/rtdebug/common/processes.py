"""Process-tree teardown with psutil: gracefully, then by force.

Ranks, the torchrun agent and anything they spawned must go; a leftover rank
keeps its debug port bound and its registry entry looking alive.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

import psutil


def tree(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes ``pids`` and all their descendants (deduplicated)."""
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
        except psutil.Error:
            continue
        found[p.pid] = p
        try:
            for c in p.children(recursive=True):
                found[c.pid] = c
        except psutil.Error:
            pass
    found.pop(os.getpid(), None)
    return list(found.values())


def group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.pid != os.getpid():
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def _gone(p: psutil.Process) -> bool:
    """Exited, or a zombie: it holds no port and runs nothing, and only its parent can reap it
    (psutil.wait_procs would wait out the whole grace period for another process's zombie)."""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _gone(p)]
    return alive


def terminate(procs: list[psutil.Process], grace_s: float = 10.0) -> list[psutil.Process]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL what is left. Returns what survived."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    alive = _wait_gone(procs, grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return _wait_gone(alive, 5)
