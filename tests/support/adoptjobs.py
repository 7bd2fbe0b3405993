"""Plain torchrun jobs started without rtdebug, for the ``rtdebug adopt`` tests (``tests/e2e/test_adopt*.py``), and
what those tests check of a rank after a detach: its fds, listening ports, and threads with a frame of rtdebug."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from rtdebug.inject import jobs
from rtdebug.inject import runner as inject

from support.jobs import rtdebug
from support.paths import PY, SCRIPTS
from support.procs import kill_tree
from support.sigs import default_dispositions

JOB = SCRIPTS / "adopt_job.py"


def can_ptrace() -> str | None:
    if sys.platform != "linux":
        return "ptrace injection is Linux only"
    return inject.ptrace_denied(os.getpid())


class PlainJob:
    """A torchrun job started without rtdebug; killed with its tree at the end."""

    def __init__(
        self, tmp: Path, env: dict[str, str] | None = None, prefix: list[str] | None = None, extra: tuple = ()
    ) -> None:
        self.control = tmp / f"control-{time.monotonic_ns()}"
        self.log = tmp / f"plain-{time.monotonic_ns()}.log"
        self._f = open(self.log, "wb")
        e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        e.pop("RTDEBUG_SESSION", None)
        run = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *extra]
        cmd = [*(prefix or []), *run, str(JOB), str(self.control)]
        self.proc = subprocess.Popen(
            cmd, cwd=tmp, env=e, stdout=self._f, stderr=subprocess.STDOUT, preexec_fn=default_dispositions
        )
        self.tmp = tmp

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_running(self, timeout: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.output().count("running") >= 2:
                return [r.pid for r in jobs.job_of(self.agent()).ranks]
            assert self.proc.poll() is None, self.output()
            time.sleep(0.2)
        raise AssertionError(self.output())

    def agent(self) -> psutil.Process:
        p = psutil.Process(self.proc.pid)
        return p if jobs.is_agent(p) else p.children()[0]  # under setpriv, the agent is its child (or itself)

    def finish(self, timeout: float = 120) -> int:
        self.control.touch()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        kill_tree(self.proc)
        self._f.close()


def adopt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return rtdebug("adopt", *args, env=env)


def listening(port: int) -> bool:
    return any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections("tcp"))


def fds(pid: int) -> list[str]:
    """What each of ``pid``'s file descriptors is open on (a path, ``socket:[inode]``, ...)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return out


def left_open(pid: int, before: list[str], registry_dir: Path) -> list[str]:
    """fds ``pid`` has now that rtdebug opened: new sockets, anything in the registry (coll-N.bin, dirs)."""
    return [f for f in fds(pid) if (f.startswith("socket:") and f not in before) or f.startswith(str(registry_dir))]


def foreign_threads(agent: int) -> list[str]:
    """Threads of the job's ranks (py-spy, read-only) with a frame of rtdebug or the debugger."""
    r = rtdebug("stacks", "--pid", str(agent), "--json")
    assert r.returncode == 0, r.stderr
    out = []
    for g in json.loads(r.stdout)["groups"]:
        for t in g["threads"]:
            files = [f["file"] for f in t["frames"]]
            if any("rtdebug" in f or "pydevd" in f or "debugpy" in f for f in files):
                out.append(f"rank {t['rank']}: " + " < ".join(f"{f['function']}:{f['line']}" for f in t["frames"]))
    return out
