"""Shared fixtures: an isolated registry, a free port range, and real jobs that never leak."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PY = sys.executable


def marker_line(path: Path, marker: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if f"BREAKPOINT: {marker}" in line:
            return i
    raise AssertionError(f"no BREAKPOINT: {marker} in {path}")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "bound"
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(autouse=True)
def own_config_dir(tmp_path_factory, monkeypatch) -> Path:
    """The per-user default job secret lives under ``$XDG_CONFIG_HOME/rtdebug`` (``rtdebug.registry.signing``):
    every test, and every process it starts, gets a config directory of its own, never the developer's."""
    d = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(d))
    return d


@pytest.fixture
def registry_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "registry"
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(d))
    return d


@pytest.fixture
def port_base() -> int:
    """A base with 16 free ports after it, away from the default 5678 that a developer may use."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        if all(port_free(base + i) for i in range(16)):
            return base
    raise RuntimeError("no free port range")


class Job:
    """A real `rtdebug ...` process; output goes to a file so a full pipe can never block it."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._f = open(log, "wb")
        self.proc = subprocess.Popen(
            [PY, "-m", "rtdebug", *args], cwd=cwd, env=env, stdout=self._f, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_output(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if text in out:
                return out
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not printed (exit {self.proc.poll()}):\n{self.output()[-4000:]}")

    def session_id(self, timeout: float = 120) -> str:
        out = self.wait_output("rtdebug: session ", timeout)
        return out.split("rtdebug: session ", 1)[1].split()[0].rstrip(":")

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"job still running after {timeout}s:\n{self.output()[-4000:]}") from None

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def kill(self) -> None:
        kill_tree(self.proc)
        self._f.close()


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


@pytest.fixture
def job(tmp_path, registry_dir):
    """Factory for real jobs; every one is killed (with its tree) at the end of the test."""
    jobs: list[Job] = []

    def start(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Job:
        e = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(registry_dir), PYTHONUNBUFFERED="1")
        e.update(env or {})
        j = Job(list(args), cwd, e, tmp_path / f"job{len(jobs)}.log")
        jobs.append(j)
        return j

    yield start
    for j in jobs:
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


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
