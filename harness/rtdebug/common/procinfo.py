"""Process identity: a pid plus its create time, so a reused pid never passes for the process we recorded.

Read from /proc (psutil's own formula, so values agree with psutil's to the microsecond), because a
rank records its own create time on its start path, where importing psutil would cost ~15 ms; psutil
is the fallback where /proc cannot tell.
"""

from __future__ import annotations

import os

SAME_PROCESS_S = 0.01  # create times this close are the same process
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot_time: float | None = None
_UNKNOWN = (OSError, ValueError, IndexError, StopIteration)  # /proc missing or not as expected


def _proc_stat(pid: int) -> tuple[float, bytes] | None:
    """(create time, state letter) from /proc/<pid>/stat and /proc/stat's btime; None: no such process.

    Raises one of ``_UNKNOWN`` where /proc cannot tell (not Linux, unreadable).
    """
    global _boot_time
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        if os.path.exists("/proc/self/stat"):
            return None
        raise
    if _boot_time is None:
        with open("/proc/stat", "rb") as f:
            _boot_time = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    return int(fields[19]) / _CLOCK_TICKS + _boot_time, fields[0]


_machine: str | None = None


def machine_id() -> str:
    """This kernel's boot and this process's pid namespace (``<boot_id>/pid:[<inode>]``): two processes whose
    pids mean the same processes share it. A hostname does not say that (containers and network namespaces
    can share one; a laptop can be named as a cluster node is). "" where /proc cannot tell: never a match.
    Read once: neither changes for a running process, and a view asks it for every entry it reads."""
    global _machine
    if _machine is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
            _machine = f"{boot}/{os.readlink('/proc/self/ns/pid')}" if boot else ""
        except OSError:
            _machine = ""
    return _machine


def process_create_time(pid: int) -> float | None:
    """psutil's ``Process(pid).create_time()``; None if there is no such process."""
    try:
        st = _proc_stat(pid)
        return None if st is None else st[0]
    except _UNKNOWN:
        pass
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_alive(pid: int, create_time: float) -> bool:
    """True if ``pid`` runs (not a zombie) and is the same process (not a reused pid)."""
    try:
        st = _proc_stat(pid)  # one read for both facts
        return st is not None and abs(st[0] - create_time) <= SAME_PROCESS_S and st[1] != b"Z"
    except _UNKNOWN:
        pass
    import psutil

    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) <= SAME_PROCESS_S and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
