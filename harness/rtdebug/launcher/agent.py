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

from rtdebug.common import lifetime, log

ENV_NAME = "RTDEBUG_ENTRYPOINT_NAME"  # the exec'd agent (below) learns the job's name from its environment


def cuda_loaded() -> bool:
    """True if a CUDA driver is mapped into this process (after which fork is unsafe)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libcuda.so" in line for line in f)
    except OSError:
        return True  # cannot tell: do not fork


class Agent:
    """The torchrun agent (forked or exec'd) as the launcher and hangwatch use it.

    ``poll``/``wait`` never reap it (``waitid(..., WNOWAIT)``): until ``reap``, an exited agent stays this
    process's zombie, so its pid -- and its process group id -- cannot be reused, and the launcher's
    teardown can take the agent's tree and group (``rtdebug.launcher.torchrun``) without ever naming a
    stranger. ``send_signal`` never signals after ``reap``."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._popen = popen  # kept referenced: a collected Popen would reap the agent behind our back
        # reentrant: the launcher's signal handlers forward to the agent on the main thread, which may be
        # inside ``reap`` (blocked in waitpid) or ``send_signal`` when a second signal comes
        self._lock = threading.RLock()
        self._reaped = False

    def _peek(self, block: bool) -> int | None:
        if self.returncode is not None:
            return self.returncode
        flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        try:
            info = os.waitid(os.P_PID, self.pid, flags)
        except ChildProcessError:
            self.returncode = 255  # reaped elsewhere: unknown code
            return self.returncode
        if info is None:
            return None
        self.returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        return self.returncode

    def poll(self) -> int | None:
        """The exit code once the agent has exited, else None; never reaps it."""
        return self._peek(block=False)

    def wait(self, timeout: float | None = None) -> int:
        """Block until the agent exits (never reaps it); ``subprocess.TimeoutExpired`` after ``timeout``."""
        if timeout is None:
            code = self._peek(block=True)
            assert code is not None
            return code
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("torchrun agent", timeout)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> bool:
        """Signal the agent while it runs; False (nothing sent) once it has exited."""
        with self._lock:
            if self._reaped or self.poll() is not None:
                return False
            try:
                os.kill(self.pid, sig)
                return True
            except OSError:
                return False

    def reap(self) -> int:
        """Collect the agent's exit status (waits for its exit). After this its pid may be reused."""
        with self._lock:
            if not self._reaped:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    code = 255
                self.returncode = code if self.returncode is None else self.returncode
                self._reaped = True
                if self._popen is not None:
                    self._popen.returncode = self.returncode
        assert self.returncode is not None
        return self.returncode


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


def start(argv: list[str], env: dict[str, str], name: str | None = None) -> Agent:
    """Start torchrun with ``argv`` (its options, the rank bootstrap, the target) and ``env``;
    ``name``: what torchrun's failure summary calls the job (the user's script)."""
    if cuda_loaded() or threading.active_count() > 1:
        p = subprocess.Popen(
            [sys.executable, "-m", "rtdebug.launcher.agent", *argv],
            env=dict(env, **{ENV_NAME: name or ""}),
            start_new_session=True,
            preexec_fn=lifetime.agent_preexec,
        )
        return Agent(p.pid, p)
    import torch.distributed.run  # noqa: F401  (loaded by the launcher's parser already)

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return Agent(pid)
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
        log.swallowed("launcher.agent: what ``python -m`` would print: torchrun's ChildFailedError report")
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
