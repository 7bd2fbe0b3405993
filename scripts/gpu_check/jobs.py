"""The GPU check's processes: one context per run (interpreter, folders, registry, what it started), and jobs.

Every process is a ``support.jobs.Job`` started in its own session and logged to ``$OUT/logs/NAME.log``;
``Ctx.end_all`` ends whatever a check left running (its process group, TERM then KILL), by the pids this run
started, never by name. The helpers come from ``tests/support`` (``scripts/gpu-check.sh`` puts it on PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.dap import DAPClient
from support.jobs import Job
from support.paths import marker_line
from support.ports import PortRanges
from support.wait import until

RANK_SCRIPT = Path(__file__).resolve().parent / "rank_job.py"


def rank_line(marker: str) -> int:
    """The line of ``# BREAKPOINT: marker`` (or ``# RAISE SITE: marker``) in rank_job.py."""
    return marker_line(RANK_SCRIPT, marker, ("BREAKPOINT: ", "RAISE SITE: "))


@dataclass
class Ctx:
    root: Path
    out: Path
    work: Path
    dry: bool
    python: str  # the interpreter with rtdebug ("" until installed)
    wheelhouse: Path
    hold_s: float
    bench_seconds: float
    bench_rounds: int
    procs: list[Job] = field(default_factory=list)
    clients: list[DAPClient] = field(default_factory=list)
    partial: dict[str, Any] = field(default_factory=dict)  # what a check learned so far (kept if it times out)
    owner: str = ""  # the thread of the check that runs now: the one thread that may start processes
    _n: int = 0
    ports: PortRanges = field(default_factory=lambda: PortRanges(21000 + os.getpid() % 9000, 60000, gap=6))

    @property
    def registry(self) -> Path:
        p = self.work / "registry"
        p.mkdir(mode=0o700, exist_ok=True)
        return p

    @property
    def logs(self) -> Path:
        p = self.out / "logs"
        p.mkdir(exist_ok=True)
        return p

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    def env(self, **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("RTDEBUG_", "GPU_CHECK_OWN_PATH"))}
        user_path = e.pop("PYTHONPATH", "").removeprefix(os.environ.get("GPU_CHECK_OWN_PATH", "")).lstrip(":")
        e.update({"PYTHONPATH": user_path} if user_path else {})  # the jobs get the caller's PYTHONPATH only
        e.update(RTDEBUG_REGISTRY_DIR=str(self.registry), PYTHONUNBUFFERED="1", GPU_CHECK_DEVICE=self.device)
        e["XDG_CONFIG_HOME"] = str(self.work / "config")  # the job secret of this run, never the user's own
        e.update(extra)
        return e

    def start(self, name: str, argv: list[str], **env: str) -> Job:
        if threading.current_thread().name != self.owner:
            raise AssertionError(f"not started: {name} (its check is over)")
        p = Job([], self.work, self.env(**env), self.logs / f"{name}.log", argv=argv, name=name, own_group=True)
        self.procs.append(p)
        return p

    def rtdebug(self, name: str, *args: object, **env: str) -> Job:
        return self.start(name, [self.python, "-m", "rtdebug", *map(str, args)], **env)

    def torchrun(self, name: str, base: int, rank_args: list[object], *opts: object, nproc: int = 1, **env: str) -> Job:
        """``rtdebug torchrun [opts]`` of ``nproc`` ranks of rank_job.py, their ports from ``base``."""
        return self.rtdebug(
            name,
            "torchrun",
            "--debug-port-base",
            base,
            *opts,
            "--nproc-per-node",
            nproc,
            "--rdzv-endpoint",
            f"127.0.0.1:{base + 8}",
            RANK_SCRIPT,
            *rank_args,
            **env,
        )

    def cmd(self, *args: object, timeout: float = 60) -> subprocess.CompletedProcess:
        """A short ``rtdebug ...`` command (ps, stacks, stop, adopt); its output also goes to the log."""
        r = subprocess.run(
            [self.python, "-m", "rtdebug", *map(str, args)],
            cwd=self.work,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        with open(self.logs / "commands.log", "a") as f:
            f.write(f"$ rtdebug {' '.join(map(str, args))}  -> {r.returncode}\n{r.stdout}{r.stderr}\n")
        return r

    def files(self, tag: str) -> tuple[Path, Path]:
        """A fresh (info, control) pair for one job."""
        self._n += 1
        return self.work / f"{tag}-{self._n}.info", self.work / f"{tag}-{self._n}.control"

    def note(self, info: Path, n: int, timeout: float, proc: Job | None = None) -> dict[str, Any]:
        path = Path(f"{info}.{n}")

        def ready() -> bool:
            return path.exists() or (proc is not None and proc.proc.poll() is not None)

        until(ready, timeout, f"note {n} of {info.name}", context=proc.tail if proc else None)
        if not path.exists():
            raise AssertionError(
                f"{proc.name if proc else 'the rank'} exited before note {n}: {proc.tail() if proc else ''}"
            )
        return json.loads(path.read_text())

    def entry(self, sid: str, rank: int = 0) -> dict[str, Any]:
        try:
            return json.loads((self.registry / sid / f"rank-{rank}.json").read_text())
        except (OSError, ValueError):
            return {}

    def free_base(self, n: int = 10) -> int:
        return self.ports.take(n)

    def client(self, port: int) -> DAPClient:
        c = DAPClient("127.0.0.1", port, timeout=60)
        self.clients.append(c)
        return c

    def end_all(self) -> None:
        for c in self.clients:
            c.close()
        for p in self.procs:
            p.kill()
        self.clients, self.procs = [], []
