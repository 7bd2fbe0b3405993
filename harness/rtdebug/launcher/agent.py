"""The torchrun agent, forked from the launcher: one torch import on the launch path, not two.

The launcher imports torch anyway: it reuses torchrun's own parser (so a bad option
reads exactly as torchrun's) and its ``--nnodes``/``--nproc-per-node`` helpers.
Starting the agent as ``python -m torch.distributed.run`` then imported torch a
second time, ~1.5x plain torchrun from launch to the first step. Instead the
launcher forks, and the child calls ``torch.distributed.run.main(argv)`` -- what
``python -m`` would run -- in the interpreter that has torch loaded already.

Fork is safe here because nothing fork-unsafe exists yet: the launcher never
touches CUDA (the NCCL heartbeat variable is set without asking whether there is a
GPU), it forks before starting its own threads, and if a CUDA driver is mapped
anyway (``--nproc-per-node gpu`` counted the devices) it execs a fresh agent as
before. torch's DataLoader forks its workers after ``import torch`` by default too.

The child is what a fresh agent would be: its own session (the launcher alone
decides teardown), ``PR_SET_PDEATHSIG=SIGTERM`` (``rtdebug.common.lifetime``), the ranks'
environment, a fresh Python's signal handlers, none of the launcher's atexit hooks,
and torchrun's exit code (a failure prints torchrun's error report, as ``-m`` would).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import NoReturn

from rtdebug.common import lifetime

ENV_NAME = "RTDEBUG_ENTRYPOINT_NAME"  # the exec'd agent (below) learns the job's name from its environment


def cuda_loaded() -> bool:
    """True if a CUDA driver is mapped into this process (after which fork is unsafe)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libcuda.so" in line for line in f)
    except OSError:
        return True  # cannot tell: do not fork


class ForkedAgent:
    """The part of ``subprocess.Popen`` the launcher and hangwatch use, for a forked child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # one waitpid at a time, as Popen does

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:
                pid, status = self.pid, 255 << 8  # reaped elsewhere: unknown code
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if not self._lock.acquire(blocking=False):
            return self.returncode  # another thread is waiting on it
        try:
            return self._reap(os.WNOHANG)
        finally:
            self._lock.release()

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            with self._lock:
                code = self._reap(0)
            assert code is not None
            return code
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("torchrun agent", timeout)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def name_entrypoint(name: str | None) -> None:
    """torchrun's failure summary ("<name> FAILED") names the entry point, which for every rank is
    ``rtdebug.rank.bootstrap``; the user ran their script, so name that (in the agent only)."""
    if not name:
        return
    try:
        from torch.distributed.launcher import api
    except ImportError:
        return
    if callable(getattr(api, "_get_entrypoint_name", None)):
        api._get_entrypoint_name = lambda entrypoint, args: name


def start(argv: list[str], env: dict[str, str], name: str | None = None) -> ForkedAgent | subprocess.Popen:
    """Start torchrun with ``argv`` (its options, the rank bootstrap, the target) and ``env``;
    ``name``: what torchrun's failure summary calls the job (the user's script)."""
    if cuda_loaded() or threading.active_count() > 1:
        return subprocess.Popen(
            [sys.executable, "-m", "rtdebug.launcher.agent", *argv],
            env=dict(env, **{ENV_NAME: name or ""}),
            start_new_session=True,
            preexec_fn=lifetime.agent_preexec,
        )
    import torch.distributed.run  # noqa: F401  (loaded by the launcher's parser already)

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return ForkedAgent(pid)
    _child(argv, env, parent, name)  # never returns


def _child(argv: list[str], env: dict[str, str], parent: int, name: str | None) -> NoReturn:
    code = 1
    try:
        os.setsid()
        lifetime.agent_preexec()
        if os.getppid() != parent:  # the launcher died before the guard was armed
            os._exit(1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        atexit._clear()  # the launcher's hooks are not the agent's
        os.environ.clear()
        os.environ.update(env)
        from torch.distributed import run

        name_entrypoint(name)
        sys.argv = [run.__file__, *argv]
        run.main(argv)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:  # what ``python -m`` would print: torchrun's ChildFailedError report
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":  # the exec'd agent (CUDA already mapped in the launcher): torchrun, named
    from torch.distributed import run as _run

    name_entrypoint(os.environ.pop(ENV_NAME, None))
    sys.argv = [_run.__file__, *sys.argv[1:]]
    _run.main(sys.argv[1:])
