"""Jobs in another Python's venv for tests/project/test_pythons.py: each ``.venv-3.X`` (``scripts/pythons.sh``) has
the harness installed without torch, and a job runs that venv's own ``rtdebug`` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from support.dap import DAPClient
from support.jobs import Job, read_ranks
from support.paths import ROOT, SCRIPTS

SCRIPT = SCRIPTS / "torch_free.py"


def venv_bin(version: str) -> Path:
    return ROOT / f".venv-{version}" / "bin"


class VenvJob(Job):
    """conftest's Job, but started with a venv's own ``rtdebug`` entry point."""

    def __init__(self, exe: Path, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        super().__init__(args, cwd, env, log, argv=[str(exe), *args], name=f"job {exe.parent.parent.name}")


class Runner:
    """One Python's environment for a scenario: start jobs, find the rank, check the interpreter."""

    def __init__(self, version: str, tmp_path: Path, registry_dir: Path, port: int) -> None:
        self.version, self.tmp, self.registry, self.port = version, tmp_path, registry_dir, port
        self.bin = venv_bin(version)
        self.ctl = tmp_path / "ctl"
        self.ctl.mkdir()
        self.jobs: list[VenvJob] = []
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        self.env.update(RTDEBUG_REGISTRY_DIR=str(registry_dir), PYTHONUNBUFFERED="1")

    def start(self, *args: str) -> VenvJob:
        j = VenvJob(self.bin / "rtdebug", list(args), self.tmp, self.env, self.tmp / f"job{len(self.jobs)}.log")
        self.jobs.append(j)
        return j

    def rank0(self, job: VenvJob, states=("ready",), **match) -> dict:
        """Rank 0's registry entry once it is in ``states`` and has the ``match`` fields."""
        sid = job.session_id()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = read_ranks(self.registry, sid).get(0)
            if r and r["state"] in states and all(r.get(k) == v for k, v in match.items()):
                return r
            time.sleep(0.1)
        raise AssertionError(f"rank 0 not {states} {match}: {read_ranks(self.registry, sid)}\n{job.output()}")

    def check_interpreter(self, c: DAPClient, frame_id: int) -> None:
        """The debuggee is this venv's Python, without torch; on 3.12+ debugpy traces via sys.monitoring."""
        assert c.evaluate("'%d.%d' % __import__('sys').version_info[:2]", frame_id) == repr(self.version)
        assert c.evaluate("__import__('importlib.util').util.find_spec('torch') is None", frame_id) == "True"
        if tuple(map(int, self.version.split("."))) >= (3, 12):
            tool = "__import__('sys').monitoring.get_tool(__import__('sys').monitoring.DEBUGGER_ID)"
            assert c.evaluate(tool, frame_id) != "None"

    def stacks(self, sid: str) -> dict:
        r = subprocess.run(
            [str(self.bin / "rtdebug"), "stacks", "--json", "--session", sid, "--timeout", "10"],
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def close(self) -> None:
        for j in self.jobs:
            j.kill()


def debugpy_loaded(pid: int) -> bool:
    """Whether debugpy's compiled tracer is mapped into ``pid`` (it is once debugpy starts)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return "/debugpy/" in maps


def stop_in(c: DAPClient, line: int | None = None, name: str | None = None) -> dict:
    stopped = c.wait_stopped(120)
    frame = c.top_frame(stopped["threadId"])
    assert line is None or frame["line"] == line, frame
    assert name is None or frame["name"] == name, frame
    return {**frame, "threadId": stopped["threadId"], "reason": stopped.get("reason")}


def resume_without_breakpoints(c: DAPClient, frame: dict) -> None:
    c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
    c.continue_(frame["threadId"])


def require_venv(version: str) -> Path:
    exe = venv_bin(version) / "rtdebug"
    if not exe.exists():
        msg = f".venv-{version} missing: run bash scripts/pythons.sh"
        if os.environ.get("RTDEBUG_PYTHONS_REQUIRED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return exe
