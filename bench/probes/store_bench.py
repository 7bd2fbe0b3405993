"""Benchmark for job-wide stacks and the torch-free store reader (issue 21); writes bench/results/DATE-store.md.

1. ``rtdebug ps --store --json`` against a real torch TCPStore holding 1024 signed rank entries and 128
   node entries (the scale of a 128-node x 8 job), command start included; next to it the same read
   through torch's own client (``import torch.distributed`` + ``TCPStore``), what ``ps --store`` paid
   before. Goal: <= 1 s.
2. ``rtdebug stacks --store --json`` from a "laptop" network namespace on the hang example, 2 nodes x 4
   ranks (8 ranks) in their own namespaces: the whole command (start included) and the answer itself
   (``elapsed_s``: request written -> every answer read). Goal: <= 1 s. Needs CAP_NET_ADMIN (skipped
   otherwise).

    bash scripts/bench.sh probes/store_bench [--rounds N] [--only 1|2]

Result: bench/results/2026-12-04-store.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from rtdebug.registry import c10d, signing

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / time.strftime("%Y-%m-%d-store.md", time.gmtime())


PY = sys.executable
SECRET = "store-bench-secret-0123456789abcdef"
RUN = "bench"
TORCH_READ = """
import sys
from datetime import timedelta
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=10))
keys = [k for k in s.list_keys() if k.startswith("rtdebug/")]
print(len(s.multi_get(keys)))
"""


def log(msg: str) -> None:
    print(f"[store-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s [{min(xs):.3f}–{max(xs):.3f}] ({len(xs)})"


def entries(nodes: int = 128, per_node: int = 8) -> tuple[list[str], list[bytes]]:
    now = time.time()
    keys, values = [], []
    for g in range(nodes):
        node = {
            "schema_version": 1, "kind": "session", "session_id": f"20261204-000000-{g:04x}", "mode": "torchrun",
            "launcher_pid": 100 + g, "launcher_create_time": now, "command": [], "cwd": "/w", "script": "train.py",
            "nnodes": str(nodes), "nproc_per_node": per_node, "node_rank": None, "host": "0.0.0.0",
            "port_base": 5678, "ports": list(range(5678, 5678 + per_node)), "started_at": now, "updated_at": now,
            "state": "running", "store": "x:1", "rdzv_id": RUN, "node_ip": f"10.1.{g // 250}.{g % 250}",
            "hostname": f"node{g}", "heartbeat": now, "tick": 1,
        }  # fmt: skip
        keys.append(c10d.node_key(RUN, g))
        for lr in range(per_node):
            r = g * per_node + lr
            rank = {
                "schema_version": 1, "kind": "rank", "session_id": node["session_id"], "rank": r,
                "local_rank": lr, "node_rank": g, "world_size": nodes * per_node, "host": "0.0.0.0",
                "port": 5678 + lr, "pid": 1000 + r, "create_time": now, "state": "ready", "lazy": True,
                "wait": False, "attach_count": 0, "script": "train.py", "cwd": "/w", "started_at": now,
                "updated_at": now, "exit_code": None, "error": None, "node_ip": node["node_ip"],
                "hostname": node["hostname"], "heartbeat": now, "tick": 1,
            }  # fmt: skip
            keys.append(c10d.rank_key(RUN, r))
            values.append(json.dumps(signing.sign(keys[-1], rank, SECRET)).encode())
        values.insert(len(keys) - per_node - 1, json.dumps(signing.sign(c10d.node_key(RUN, g), node, SECRET)).encode())
    return keys, values


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd}: {p.stderr}")
    return took, p.stdout


def bench_ps(rounds: int) -> dict:
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    keys, values = entries()
    server.multi_set(keys, values)
    reg = tempfile.mkdtemp(prefix="rtdebug-store-bench-")
    env = dict(os.environ, RTDEBUG_JOB_SECRET=SECRET, RTDEBUG_REGISTRY_DIR=reg, RTDEBUG_STORE="")
    ps, plain = [], []
    for i in range(rounds):
        took, out = timed([PY, "-m", "rtdebug", "ps", "--json", "--store", f"127.0.0.1:{server.port}"], env)
        job = json.loads(out)["sessions"][0]
        assert len(job["ranks"]) == 1024 and job["verified"], job["session_id"]
        ps.append(took)
        took, out = timed([PY, "-c", TORCH_READ, str(server.port)], env)
        assert int(out) == len(keys)
        plain.append(took)
        log(f"ps round {i + 1}: rtdebug ps --store {ps[-1]:.3f} s, torch client read {plain[-1]:.3f} s")
    return {"ps": ps, "torch_read": plain, "entries": len(keys)}


def bench_stacks(rounds: int) -> dict | None:
    from support.netns import Hosts, sweep
    from support.paths import EXAMPLES

    os.environ["RTDEBUG_JOB_SECRET"] = SECRET
    sweep()
    tmp = Path(tempfile.mkdtemp(prefix="rtdebug-store-bench-ns-"))
    hosts = Hosts(tmp)
    try:
        try:
            hosts.up()
        except subprocess.CalledProcessError as exc:
            log(f"skipping the 2-node bench: cannot create network namespaces ({exc.stderr.strip()})")
            return None
        store = f"{hosts.addr['n0']}:29500"
        for i, node in enumerate(("n0", "n1")):
            args = ["torchrun", "--debug-host", "auto", "--debug-allow", hosts.addr["lap"], "--hang-report", "0"]
            args += ["--nnodes=2", "--nproc-per-node=4", f"--node_rank={i}", "--rdzv_backend=c10d"]
            args += [f"--rdzv_endpoint={store}", "--rdzv_id=job", f"--rdzv-conf=is_host={1 - i}"]
            hosts.start(node, [*args, "--local-addr", hosts.addr[node], str(EXAMPLES / "hang.py")])
        cmd = ["env", "PYTHONUNBUFFERED=1", PY, "-m", "rtdebug", "stacks", "--json", "--store", store]
        deadline = time.monotonic() + 300
        while True:  # until the 8 ranks hang in two groups
            r = hosts.run("lap", *cmd)
            if r.returncode == 0 and len(json.loads(r.stdout)["groups"]) == 2:
                snap = json.loads(r.stdout)
                if sum(len(g["ranks"]) for g in snap["groups"]) == 8:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the 8 ranks never hung: {r.stderr}\n{hosts.log('n0')}")
            time.sleep(2)
        wall, answer = [], []
        for i in range(rounds):
            t0 = time.perf_counter()
            r = hosts.run("lap", *cmd)
            wall.append(time.perf_counter() - t0)
            snap = json.loads(r.stdout)
            assert sum(len(g["ranks"]) for g in snap["groups"]) == 8, snap["unresponsive_detail"]
            answer.append(snap["elapsed_s"])
            log(f"stacks round {i + 1}: command {wall[-1]:.3f} s, answer {answer[-1]:.3f} s")
        return {"wall": wall, "answer": answer, "groups": [g["ranks"] for g in snap["groups"]]}
    finally:
        hosts.down()


def write(ps: dict | None, st: dict | None) -> None:
    lines = [
        "# Job-wide stacks and the torch-free store reader (bench/probes/store_bench.py)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared with other work), Python {platform.python_version()}. "
        "Median [min–max] (rounds).",
        "",
        "| What | Measured | Goal | Verdict |",
        "|---|---|---|---|",
    ]
    if ps:
        ok = statistics.median(ps["ps"]) <= 1.0
        lines.append(
            f"| `ps --store --json`, {ps['entries']} signed entries (1024 ranks, 128 nodes), command start "
            f"included | {summary(ps['ps'])} | ≤ 1 s | {'met' if ok else 'missed'} |"
        )
        lines.append(
            f"| the same read through torch's client (import torch.distributed + TCPStore), before | "
            f"{summary(ps['torch_read'])} | – | – |"
        )
    if st:
        ok = statistics.median(st["wall"]) <= 1.0
        lines.append(
            f"| `stacks --store --json` from the laptop namespace, 2 nodes x 4 ranks hung (groups "
            f"{st['groups']}), command start included | {summary(st['wall'])} | ≤ 1 s | {'met' if ok else 'missed'} |"
        )
        lines.append(f"| of which the answer (request written → 8 answers read) | {summary(st['answer'])} | – | – |")
    OUT.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", choices=("1", "2"))
    a = ap.parse_args()
    ps = bench_ps(a.rounds) if a.only in (None, "1") else None
    st = bench_stacks(a.rounds) if a.only in (None, "2") else None
    write(ps, st)
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
