"""Separate hosts for e2e tests: network namespaces on a private bridge, and what runs in them.

Only addresses inside namespaces made here are used (10.203.X.0/24, X random per
test), and ``down`` kills what runs inside them (nothing else can) and deletes them.
Names carry the test process's pid, so namespaces left by a test run that was
itself killed (no ``finally``) are swept by the next run.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
from pathlib import Path

import psutil

from support.paths import PY, ROOT, support_env
from support.sigs import default_dispositions


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


PREFIX = "rtdmn"


def _kill_inside(ns: str) -> None:
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def sweep() -> None:
    """Delete namespaces of earlier test runs whose process is gone (and whatever runs in them)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"{PREFIX}(\d+)x\d+-", name)
        if m and not psutil.pid_exists(int(m.group(1))):
            _kill_inside(name)
            _ip("netns", "del", name, check=False)


class Hosts:
    """Namespaces ``n0``, ``n1`` (nodes) and ``lap`` (laptop) on a bridge in a namespace of its own."""

    def __init__(self, tmp: Path) -> None:
        tag = f"{PREFIX}{os.getpid()}x{random.randrange(100):02d}"
        self.tmp = tmp
        self.subnet = f"10.203.{random.randrange(1, 255)}"
        self.bridge = f"{tag}-br"
        self.names = {h: f"{tag}-{h}" for h in ("n0", "n1", "lap")}
        self.addr = {h: f"{self.subnet}.{i + 1}" for i, h in enumerate(self.names)}
        self.made: list[str] = []
        self.procs: list[subprocess.Popen] = []

    def up(self) -> None:
        _ip("netns", "add", self.bridge)
        self.made.append(self.bridge)
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, (h, ns) in enumerate(self.names.items()):
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip(
                "link",
                "add",
                "name",
                "eth0",
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                f"p{i}",
                "netns",
                self.bridge,
            )
            _ip("-n", self.bridge, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def pids(self, h: str) -> list[int]:
        out = _ip("netns", "pids", self.names[h], check=False).stdout
        return [int(p) for p in out.split()]

    def down(self) -> None:
        """Kill what runs inside our namespaces (only our processes run there), then delete them."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for ns in self.made:
            _kill_inside(ns)
        for ns in reversed(self.made):
            _ip("netns", "del", ns, check=False)

    def env(self, h: str) -> dict[str, str]:
        reg = self.tmp / f"registry-{h}"
        return dict(
            support_env(),  # the test scripts a host runs import support (dap_probe.py)
            RTDEBUG_REGISTRY_DIR=str(reg),
            GLOO_SOCKET_IFNAME="eth0",
            NODE_ADDR=self.addr[h],
            PYTHONUNBUFFERED="1",
            RTDEBUG_STORE="",
        )

    def start(self, h: str, args: list[str], **env: str) -> subprocess.Popen:
        """``rtdebug ARGS`` in namespace ``h``, output to ``<tmp>/<h>.log``."""
        log = open(self.tmp / f"{h}.log", "wb")
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.names[h], PY, "-m", "rtdebug", *args],
            cwd=ROOT,
            env=dict(self.env(h), **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=default_dispositions,
        )
        self.procs.append(p)
        return p

    def spawn(self, h: str, *args: str) -> subprocess.Popen:
        """A process in namespace ``h`` whose stdout the test reads line by line (killed by ``down``)."""
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.names[h], *args],
            cwd=ROOT,
            env=self.env(h),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=default_dispositions,
        )
        self.procs.append(p)
        return p

    def log(self, h: str, tail: int = 3000) -> str:
        path = self.tmp / f"{h}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def trouble(self, hosts: tuple[str, ...] = ("n0", "n1"), per_host: int = 30) -> str:
        """What went wrong first on each host, from its whole log: an assertion shows only a log's tail,
        and when a multi-node job dies the first failure is on one host while the tail is another's
        echo of it (a peer's "Connection closed by peer")."""
        pattern = re.compile(r"Error|Fatal|Segmentation|exitcode|Signal|rtdebug: |Traceback")
        out = []
        for h in hosts:
            lines = [ln[:300] for ln in self.log(h, tail=1 << 30).splitlines() if pattern.search(ln)]
            out.append(f"--- {h}: the first {min(per_host, len(lines))} of {len(lines)} lines that say what went wrong")
            out.extend(lines[:per_host])
        return "\n".join(out)

    def run(self, h: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.names[h], *args],
            cwd=ROOT,
            env=self.env(h),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def rtdebug(self, h: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run(h, PY, "-m", "rtdebug", *args, timeout=timeout)


def hosts_up(tmp_path: Path):
    """A pytest fixture body: fresh namespaces (earlier runs' swept), skipped with the reason where they
    cannot be made, always taken down."""
    import shutil

    import pytest

    if shutil.which("ip") is None:
        pytest.skip("cannot create network namespaces here: iproute2 (`ip`) is not installed")
    sweep()
    h = Hosts(tmp_path)
    try:
        try:
            h.up()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot create network namespaces here (needs CAP_NET_ADMIN): {exc.stderr.strip()}")
        yield h
    finally:
        h.down()
