"""Real ``rtdebug ...`` processes (the ``job`` fixture's machinery, the GPU check's jobs) and their ranks'
registry entries. psutil is imported where it is used (the GPU check runs on a machine's bare Python)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from support.paths import PY, ROOT
from support.procs import end_group, kill_tree
from support.sigs import default_dispositions
from support.wait import until


class Job:
    """A real `rtdebug ...` process (or ``argv``); output goes to a file so a full pipe can never block it.
    ``own_group``: started in its own session, and ended with its whole process group (``end_group``)."""

    def __init__(
        self, args: list[str], cwd: Path, env: dict[str, str], log: Path, *,
        argv: list[str] | None = None, name: str = "job", own_group: bool = False,
    ) -> None:  # fmt: skip
        self.log, self.name, self.own_group = log, name, own_group
        self._f = open(log, "ab")
        self.proc = subprocess.Popen(
            argv or [PY, "-m", "rtdebug", *args], cwd=cwd, env=env, stdout=self._f, stderr=subprocess.STDOUT,
            preexec_fn=default_dispositions,  # tests signal jobs: as from a terminal, however the suite started
            start_new_session=own_group,
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, n: int = 4000) -> str:
        return self.output()[-n:]

    def wait_output(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if text in out:
                return out
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {text!r} not printed (exit {self.proc.poll()}):\n{self.tail()}")

    def session_id(self, timeout: float = 120) -> str:
        out = self.wait_output("rtdebug: session ", timeout)
        return out.split("rtdebug: session ", 1)[1].split()[0].rstrip(":")

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout:.0f} s:\n{self.tail()}") from None

    def descendants(self) -> list:
        import psutil

        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def kill(self) -> None:
        """Its tree killed (or, ``own_group``, its process group ended: TERM, then KILL) and reaped."""
        if self.own_group:
            end_group(self.proc)
        else:
            kill_tree(self.proc)
        self._f.close()


class Jobs:
    """The ``job`` fixture: starts real jobs against one registry, logs under ``tmp``; ``kill_all`` ends every one
    (with its tree)."""

    def __init__(self, tmp: Path, registry_dir: Path) -> None:
        self.tmp, self.registry_dir = tmp, registry_dir
        self.jobs: list[Job] = []

    def start(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Job:
        e = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(self.registry_dir), PYTHONUNBUFFERED="1")
        e.update(env or {})
        j = Job(list(args), cwd, e, self.tmp / f"job{len(self.jobs)}.log")
        self.jobs.append(j)
        return j

    def kill_all(self) -> None:
        for j in self.jobs:
            j.kill()


def read_ranks(registry_dir: Path, session_id: str) -> dict[int, dict]:
    out = {}
    for p in (registry_dir / session_id).glob("rank-*.json"):
        try:
            e = json.loads(p.read_text())
        except ValueError:
            continue
        out[e["rank"]] = e
    return out


def wait_ranks(
    registry_dir: Path, session_id: str, n: int, states=("ready", "attached"), timeout: float = 120
) -> dict[int, dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = read_ranks(registry_dir, session_id)
        if len([r for r in ranks.values() if r["state"] in states]) >= n:
            return ranks
        time.sleep(0.1)
    raise AssertionError(f"ranks not {states}: {read_ranks(registry_dir, session_id)}")


def rtdebug(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [PY, "-m", "rtdebug", *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout
    )


def until_debug(registry_dir: Path, session_id: str, rank: int, state: str, ok=None, **fields) -> dict:
    """Wait until rank ``rank``'s entry says debug state ``state`` with these ``fields`` (and ``ok(debug)``, if
    given); its ``debug`` field."""

    def good(d: dict) -> bool:
        return d.get("state") == state and all(d.get(k) == v for k, v in fields.items()) and (ok is None or ok(d))

    return until(
        lambda: read_ranks(registry_dir, session_id)[rank].get("debug") or {},
        60,
        f"rank {rank} {state} {fields}",
        ok=good,
    )


def ps_debug(registry_dir: Path) -> tuple[str, dict[int, dict]]:
    """``rtdebug ps`` as text, and each rank's ``debug`` field from ``ps --json``, for the one session there."""
    env = {"RTDEBUG_REGISTRY_DIR": str(registry_dir)}
    text, js = rtdebug("ps", env=env), rtdebug("ps", "--json", env=env)
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    (session,) = json.loads(js.stdout)["sessions"]
    return text.stdout, {r["rank"]: r.get("debug") or {} for r in session["ranks"]}


def continue_and_finish(j: Job, registry_dir: Path, session_id: str, client, thread: int, done: Path, script) -> None:
    """All-stop's tests' end: ``client``'s breakpoints in ``script`` cleared, a continue in its rank (which
    continues every rank), rank 0 running again, the job told to end (``done``) and ended well, every rank
    saying so (``rank N ended after``)."""
    client.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
    client.continue_(thread)
    until_debug(registry_dir, session_id, 0, "running")
    done.write_text("")
    assert j.wait(120) == 0
    out = j.output()
    assert "rank 0 ended after" in out and "rank 1 ended after" in out
