"""Nothing rtdebug starts outlives its launcher, however the launcher dies.

torchrun runs in its own session (so the launcher alone decides teardown) and
starts every rank in a session of its own, so a SIGKILLed launcher (OOM, a
killed VS Code task, ``kill -9``) used to leave the agent and all ranks running
with their debug ports bound. Three guards, none of which needs the rank's main
thread to run Python (it may be stopped at a breakpoint or blocked in a C++
collective):

1. The torchrun agent gets ``PR_SET_PDEATHSIG = SIGTERM`` (kernel-delivered when
   the launcher dies): torchrun's own shutdown then stops its workers.
2. Every rank gets ``PR_SET_PDEATHSIG = SIGKILL`` for its parent, the agent: if
   the agent is killed outright, the kernel ends the rank.
3. Every rank watches the launcher itself from a daemon thread blocked in
   ``select`` on a pidfd (no polling, no per-step cost; the thread is hidden
   from the debugger so a breakpoint never suspends it). When the launcher is
   gone it records why and SIGKILLs its own process: this also covers an agent
   that hangs in its graceful shutdown.

SIGKILL on stopped or C-blocked processes works; nothing here can be caught by
user code. Linux only; elsewhere the guards are no-ops and ``ps``/``stop``
still find orphans (``rtdebug.registry.liveness``).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from collections.abc import Callable

from rtdebug.common import log

PR_SET_PDEATHSIG = 1
ENV_PID = "RTDEBUG_LAUNCHER_PID"
ENV_CT = "RTDEBUG_LAUNCHER_CT"


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def agent_preexec() -> None:
    """``preexec_fn`` for the torchrun agent (runs in the child between fork and exec)."""
    set_parent_death_signal(signal.SIGTERM)


def launcher_env() -> dict[str, str]:
    """What a rank needs to watch this (launcher) process."""
    from rtdebug.common.procinfo import process_create_time

    pid = os.getpid()
    return {ENV_PID: str(pid), ENV_CT: repr(process_create_time(pid))}


def _wait_for_exit(pid: int, create_time: float) -> None:
    """Block until ``pid`` (the process started at ``create_time``) has exited."""
    from rtdebug.common.procinfo import is_alive  # no psutil: this thread starts with the rank

    fd = None
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3, Python >= 3.9
    except (AttributeError, OSError):
        fd = None
    try:
        if not is_alive(pid, create_time):
            return  # gone, or the pid was already reused: the launcher is gone
        if fd is not None:
            select.select([fd], [], [])
            return
        while is_alive(pid, create_time):
            time.sleep(1.0)
    finally:
        if fd is not None:
            os.close(fd)


def guard_rank(on_launcher_gone: Callable[[], None] | None = None) -> bool:
    """Arm guards 2 and 3 in a rank; False when there is no launcher to watch (not under rtdebug)."""
    parent = os.getppid()
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # the agent died before the guard was armed
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        pid, ct = int(os.environ[ENV_PID]), float(os.environ[ENV_CT])
    except (KeyError, ValueError):
        return False

    def watch() -> None:
        _wait_for_exit(pid, ct)
        print(
            f"rtdebug: rank {os.environ.get('RANK', '?')}: launcher pid {pid} is gone; ending this rank",
            file=sys.stderr,
            flush=True,
        )
        if on_launcher_gone is not None:
            try:
                on_launcher_gone()
            except Exception:
                log.swallowed("common.lifetime: guard_rank: going on")
        os.kill(os.getpid(), signal.SIGKILL)

    from rtdebug.common.threads import hidden_thread

    hidden_thread(watch, "rtdebug-launcher-watch")
    return True
