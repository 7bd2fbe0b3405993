"""The GPU check's processes: one context per run (interpreter, folders, registry, what it started), and jobs.

Every process is started in its own session and logged to ``$OUT/logs/NAME.log``; ``Ctx.end_all`` ends
whatever a check left running (its process group, TERM then KILL), by the pids this run started, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.dap import DAPClient
from support.wait import until

RANK_SCRIPT = Path(__file__).resolve().parent / "rank_job.py"


def marker_line(marker: str) -> int:
    """The line of ``# BREAKPOINT: marker`` (or ``# RAISE SITE: marker``) in rank_job.py."""
    for i, line in enumerate(RANK_SCRIPT.read_text().splitlines(), 1):
        if line.rstrip().endswith((f"BREAKPOINT: {marker}", f"RAISE SITE: {marker}")):
            return i
    raise AssertionError(f"no marker {marker!r} in {RANK_SCRIPT}")


class Proc:
    """A process this run started: its own session (process group), output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.name, self.log = name, log
        self._f = open(log, "ab")
        self.popen = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=self._f, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, n: int = 1500) -> str:
        return self.output()[-n:]

    def wait_output(self, text: str, timeout: float) -> str:
        def seen() -> bool:
            return text in self.output() or self.popen.poll() is not None

        until(seen, timeout, f"{self.name} prints {text!r}", context=self.tail)
        if text not in self.output():
            raise AssertionError(f"{self.name} exited {self.popen.poll()} without printing {text!r}: {self.tail()}")
        return self.output()

    def session_id(self, timeout: float = 120) -> str:
        out = self.wait_output("rtdebug: session ", timeout)
        return out.split("rtdebug: session ", 1)[1].split()[0].rstrip(":")

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout:.0f} s: {self.tail()}") from None

    def end(self) -> None:
        if self.popen.poll() is None:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.popen.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.popen.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._f.close()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


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
    procs: list[Proc] = field(default_factory=list)
    clients: list[DAPClient] = field(default_factory=list)
    partial: dict[str, Any] = field(default_factory=dict)  # what a check learned so far (kept if it times out)
    owner: str = ""  # the thread of the check that runs now: the one thread that may start processes
    _n: int = 0
    _port: int = 21000 + os.getpid() % 9000

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
        e = {k: v for k, v in os.environ.items() if not k.startswith("RTDEBUG_")}
        e.update(RTDEBUG_REGISTRY_DIR=str(self.registry), PYTHONUNBUFFERED="1", GPU_CHECK_DEVICE=self.device)
        e["XDG_CONFIG_HOME"] = str(self.work / "config")  # the job secret of this run, never the user's own
        e.update(extra)
        return e

    def start(self, name: str, argv: list[str], **env: str) -> Proc:
        if threading.current_thread().name != self.owner:
            raise AssertionError(f"not started: {name} (its check is over)")
        p = Proc(name, argv, self.env(**env), self.work, self.logs / f"{name}.log")
        self.procs.append(p)
        return p

    def rtdebug(self, name: str, *args: object, **env: str) -> Proc:
        return self.start(name, [self.python, "-m", "rtdebug", *map(str, args)], **env)

    def torchrun(
        self, name: str, base: int, rank_args: list[object], *opts: object, nproc: int = 1, **env: str
    ) -> Proc:
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

    def note(self, info: Path, n: int, timeout: float, proc: Proc | None = None) -> dict[str, Any]:
        path = Path(f"{info}.{n}")

        def ready() -> bool:
            return path.exists() or (proc is not None and proc.popen.poll() is not None)

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
        while True:
            self._port = self._port + 16 if self._port < 60000 else 21000
            if all(port_free(self._port + i) for i in range(n)):
                return self._port

    def client(self, port: int) -> DAPClient:
        c = DAPClient("127.0.0.1", port, timeout=60)
        self.clients.append(c)
        return c

    def end_all(self) -> None:
        for c in self.clients:
            c.close()
        for p in self.procs:
            p.end()
        self.clients, self.procs = [], []
