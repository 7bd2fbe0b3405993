"""Process control: a launched job (its own session, killed whole), a launched configuration, DAP clients."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from bench.suite.common import BENCH, HOST, LOOP, PY, READY, RECIPE, WORK, base_env, free_range, log, touch

from support.dap import DAPClient


# -- processes -------------------------------------------------------------------
class Job:
    """A process started in its own session; stdout lines are time-stamped as they arrive."""

    live: list[Job] = []

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path = BENCH, cpu: int | None = None) -> None:
        self.cmd = cmd
        self.t_launch = time.time()
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=pin,
        )
        self.lines: list[tuple[float, str]] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        Job.live.append(self)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            t = time.time()
            with self._cv:
                self.lines.append((t, raw.decode(errors="replace").rstrip()))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_line(self, needle: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for t, line in self.lines:
                    if needle in line:
                        return t
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(f"exited ({self.proc.returncode}) before {needle!r}:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"timed out waiting for {needle!r}:\n{self.tail()}")
                self._cv.wait(min(left, 0.5))

    def tail(self, n: int = 25) -> str:
        return "\n".join(line for _, line in self.lines[-n:])

    def members(self) -> list[psutil.Process]:
        """Everything in this job's session (torchrun, ranks, debugpy adapters), plus descendants."""
        found: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.proc.pid)
            found[root.pid] = root
            for c in root.children(recursive=True):
                found[c.pid] = c
        except psutil.Error:
            pass
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.proc.pid:
                    found[p.pid] = p
            except (OSError, psutil.Error):
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, grace: float = 5.0) -> None:
        procs = self.members()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        if self in Job.live:
            Job.live.remove(self)

    def finish(self, timeout: float = 30.0) -> None:
        """Let it exit on its own (phases done), then make sure nothing of it is left."""
        self.wait(timeout)
        self.kill()


def kill_all() -> None:
    for j in list(Job.live):
        j.kill(grace=2)


def wait_files(paths: list[Path], timeout: float, job: Job | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if job is not None and job.proc.poll() is not None:
            raise RuntimeError(f"job exited ({job.proc.returncode}) while waiting for {paths[0].name}..:\n{job.tail()}")
        if time.monotonic() > deadline:
            missing = [p.name for p in paths if not p.exists()]
            raise RuntimeError(f"timed out waiting for {missing}" + (f":\n{job.tail()}" if job else ""))
        time.sleep(0.02)


def run_phase(
    ctl: Path, name: str, nproc: int, job: Job, timeout: float = 120, also: Sequence[Path] = ()
) -> dict[str, float]:
    """Start phase `name` (in `ctl` and any `also` control dirs at the same instant) and wait for
    the results. wall = median window steps/s, best = fastest window, cpu = median steps per
    CPU-second; each the mean over ranks."""
    for c in (ctl, *also):
        touch(c / f"go-{name}")
    return read_phase(ctl, name, nproc, job, timeout)


def read_phase(ctl: Path, name: str, nproc: int, job: Job, timeout: float = 120) -> dict[str, float]:
    files = [ctl / f"res-{name}-{r}.json" for r in range(nproc)]
    wait_files(files, timeout, job)
    data = [json.loads(p.read_text()) for p in files]
    return {
        "wall": statistics.mean(statistics.median(d["rates"]) for d in data),
        "best": statistics.mean(max(d["rates"]) for d in data),
        "cpu": statistics.mean(statistics.median(d["cpu_rates"]) for d in data),
    }


# -- launching the configurations ------------------------------------------------
class Run:
    """One launched configuration with its own registry and control directory."""

    def __init__(
        self,
        kind: str,
        nproc: int,
        loop_args: list[str],
        *,
        python: str = PY,
        script: Path = LOOP,
        env_extra: dict[str, str] | None = None,
    ) -> None:
        """``kind``: plain (torchrun), lazy, eager, cold (lazy without the background debugpy import,
        ``RTDEBUG_WARM_S=0``), recipe (the hand-written debugpy recipe)."""
        self.kind, self.nproc = kind, nproc
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=WORK))
        self.ctl = self.tmp / "ctl"
        self.ctl.mkdir()
        self.registry = self.tmp / "registry"
        env = {**base_env(self.registry), **(env_extra or {})}
        if kind == "cold":
            env["RTDEBUG_WARM_S"] = "0"
        self.master = free_range(1)
        self.base = free_range(nproc)
        tr = ["--nproc-per-node", str(nproc), "--master-addr", HOST, "--master-port", str(self.master)]
        loop = [str(script), "--ctl", str(self.ctl), *loop_args]
        if kind == "plain":
            cmd = [python, "-m", "torch.distributed.run", *tr, *loop]
        elif kind in ("lazy", "eager", "cold"):
            cmd = [
                python,
                "-m",
                "rtdebug",
                "torchrun",
                "--debug-port-base",
                str(self.base),
                *(["--eager"] if kind == "eager" else []),
                *tr,
                *loop,
            ]
        elif kind == "recipe":
            env["RTDEBUG_BENCH_RECIPE_BASE"] = str(self.base)
            cmd = [python, "-m", "torch.distributed.run", *tr, str(RECIPE), *loop]
        else:
            raise ValueError(kind)
        self.job = Job(cmd, env)

    def ctlf(self, name: str) -> Path:
        return self.ctl / name

    def rank_files(self, prefix: str) -> list[Path]:
        return [self.ctl / f"{prefix}-{r}" for r in range(self.nproc)]

    def first_step_s(self) -> float:
        return max(float(p.read_text()) for p in self.rank_files("first")) - self.job.t_launch

    def phase(self, name: str, timeout: float = 120) -> dict[str, float]:
        return run_phase(self.ctl, name, self.nproc, self.job, timeout)

    def session_id(self) -> str:
        self.job.wait_line(READY, 120)
        for _, line in self.job.lines:
            if READY in line:
                return line.rsplit("session ", 1)[1].rstrip(")")
        raise RuntimeError("no session id")

    def close(self) -> None:
        self.job.kill()  # nothing left to measure: SIGTERM the whole session now, SIGKILL after 5 s
        shutil.rmtree(self.tmp, ignore_errors=True)


def attach_all(
    ports: list[int], breakpoints: dict[str, list[int]] | None = None, timeout: float = 60
) -> tuple[list[DAPClient], list[float]]:
    """Attach a DAPClient to every port in parallel; returns clients and per-port done times."""
    clients: list[Any] = [None] * len(ports)
    done: list[Any] = [None] * len(ports)
    errors: list[BaseException] = []

    def one(i: int, port: int) -> None:
        try:
            c = DAPClient(HOST, port, timeout=timeout)
            c.attach(breakpoints or {})
            clients[i] = c
            done[i] = time.time()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, p), daemon=True) for i, p in enumerate(ports)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
    if errors or None in clients:
        for c in clients:
            if c is not None:
                c.close()
        raise RuntimeError(f"attach failed: {errors[:1] or 'timeout'}")
    return clients, done


def disconnect_all(clients: list[DAPClient]) -> None:
    threads = [threading.Thread(target=c.disconnect, daemon=True) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)


def guarded(results: dict, key: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # keep the other figures; report this one as failed
        log(f"{key}: FAILED: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        results.setdefault("failures", []).append(f"{key}: {str(exc)[:800]}")
        kill_all()
        return None
