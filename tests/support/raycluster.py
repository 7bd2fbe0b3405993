"""A small real Ray cluster on this machine for tests and the bench: `ray start`, ended by its own pids.

Other jobs on this machine use Ray, so nothing here runs `ray stop` or kills by
name: the cluster's processes are those whose command line names this
cluster's temp dir or GCS address, plus their descendants (the workers).
Small on purpose: a few CPUs, a 200 MB object store, no dashboard, free ports.

CLI (by hand): ``PYTHONPATH=tests python -m support.raycluster start [--nodes 2]`` prints the address and
the temp dir; ``PYTHONPATH=tests python -m support.raycluster stop TEMP_DIR ADDRESS`` ends it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from support.ports import free_port_base

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE = str(200 * 1024 * 1024)
# Ray 2.60 turns token auth on for `ray start --head` when ~/.ray/auth_token exists (a local ray.init()
# writes one), but not for a node that joins: set the mode explicitly. Clients of the cluster need the same
# RAY_AUTH_MODE in their environment (the test fixture sets it).
AUTH_MODE = "disabled"


def _free_ports(n: int, span: int = 1) -> list[int]:
    """``n`` free port blocks of ``span`` consecutive ports each (the first port of each), apart from each other."""
    out: list[int] = []
    while len(out) < n:
        base = free_port_base(span, 42000, 60000, host="0.0.0.0")
        if all(abs(base - o) > span + 50 for o in out):
            out.append(base)
    return out


class RayCluster:
    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rtdray-", dir="/tmp")  # short: unix socket paths
        self.address: str | None = None
        self.logs: list[str] = []
        self.prefix: list[str] = []  # before `ray start` (e.g. `ip netns exec NS`: a node in a namespace)
        self.extra: list[str] = []  # after its options (e.g. `--node-ip-address`)

    def _start(self, args: list[str], num_cpus: int, resources: str | None) -> None:
        p = _free_ports(8)
        workers = _free_ports(1, span=60)[0]
        cmd = [
            *self.prefix,
            RAY,
            "start",
            *args,
            "--num-cpus",
            str(num_cpus),
            "--object-store-memory",
            OBJECT_STORE,
            "--disable-usage-stats",
            "--node-manager-port",
            str(p[0]),
            "--object-manager-port",
            str(p[1]),
            "--dashboard-agent-listen-port",
            str(p[2]),
            "--dashboard-agent-grpc-port",
            str(p[3]),
            "--runtime-env-agent-port",
            str(p[4]),
            "--metrics-export-port",
            str(p[5]),
            "--min-worker-port",
            str(workers),
            "--max-worker-port",
            str(workers + 59),
        ]
        if resources:
            cmd += ["--resources", resources]
        cmd += self.extra
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE=AUTH_MODE)
        env.pop("RAY_ADDRESS", None)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        self.logs.append(r.stdout + r.stderr)
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")

    def start_head(self, num_cpus: int = 2, resources: str | None = None, tries: int = 2) -> str:
        for attempt in range(tries):  # on a loaded machine `ray start` can time out; a fresh try usually works
            gcs, dashboard = _free_ports(2)
            try:
                self._start(
                    [
                        "--head",
                        "--port",
                        str(gcs),
                        "--temp-dir",
                        self.temp_dir,
                        "--include-dashboard=false",
                        "--dashboard-port",
                        str(dashboard),
                    ],
                    num_cpus,
                    resources,
                )
                break
            except RuntimeError:
                if attempt == tries - 1:
                    raise
                self.temp_dir = tempfile.mkdtemp(prefix="rtdray-", dir="/tmp")  # stop() removed the old one
        self.address = Path(self.temp_dir, "ray_current_cluster").read_text().strip()
        return self.address

    def add_node(self, num_cpus: int = 1, resources: str | None = None) -> None:
        assert self.address, "start the head first"
        self._start(["--address", self.address], num_cpus, resources)

    def wait_nodes(self, n: int, timeout: float = 60) -> None:
        from ray._raylet import GcsClient

        gcs = GcsClient(address=self.address)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [i for i in gcs.get_all_node_info(timeout=10).values() if i.state == 0]
            if len(alive) >= n:
                return
            time.sleep(0.5)
        raise RuntimeError(f"cluster {self.address} has fewer than {n} alive nodes")

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: command line names its temp dir or GCS address; and their children."""
        marks = [self.temp_dir] + ([f"={self.address}", f" {self.address}"] if self.address else [])
        roots: dict[int, psutil.Process] = {}
        me = psutil.Process().username()
        mine = {os.getpid()} | {q.pid for q in psutil.Process().parents()}  # `timeout ... stop DIR` names DIR too
        for p in psutil.process_iter(["cmdline", "username"]):
            try:
                line = " " + " ".join(p.info["cmdline"] or [])
            except psutil.Error:
                continue
            if p.info["username"] == me and p.pid not in mine and any(m in line for m in marks):
                roots[p.pid] = p
        out = dict(roots)
        for p in list(roots.values()):
            try:
                for c in p.children(recursive=True):
                    out[c.pid] = c
            except psutil.Error:
                pass
        return list(out.values())

    def stop(self) -> None:
        procs = self.processes()
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"]:
        c = RayCluster()
        c.start_head(num_cpus=2)
        if "--nodes" in argv and int(argv[argv.index("--nodes") + 1]) > 1:
            c.add_node()
        print(c.address, c.temp_dir)
        return 0
    if argv[:1] == ["stop"] and len(argv) == 3:
        c = RayCluster.__new__(RayCluster)
        c.temp_dir, c.address, c.logs = argv[1], argv[2], []
        c.stop()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
