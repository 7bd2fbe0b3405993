"""Local mode with the cluster's semantics, against Ray's own local mode on the same script (issue: ray.train
collectives and report() under rtdebug).

    bash scripts/bench.sh probes/raylocal_bench [--ranks 4] [--calls 200] [--launches 3]

Runs ``bench/probes/raylocal_job.py`` under ``rtdebug torchrun --nproc-per-node N`` with ``--ray-local-mode
cluster`` and ``ray``; every rank times ``calls`` calls of each API in a loop (after a warm-up) and rank 0
prints the medians as JSON. ``report()`` with a checkpoint is compared with the copy's own cost, measured in
the same job (``shutil.copytree`` of the same files into the same storage). Launch → first step: the wall
time from starting rtdebug to rank 0's first line of the train function, the median of ``launches`` runs of
each mode, interleaved. Goals: report() without a checkpoint <= 2 ms per call at 4 ranks, with one the copy
plus <= 5 ms, barrier() <= 1 ms, launch → first step within 1.05x of Ray's own local mode.

Result: bench/results/2026-12-06-raylocal.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.suite.common import base_env, free_range

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
JOB = HERE / "raylocal_job.py"


def run_job(mode: str, ranks: int, calls: int, first_step_only: bool = False) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as storage:
        args = [sys.executable, "-m", "rtdebug", "torchrun", "--ray-local-mode", mode]
        args += ["--debug-port-base", str(free_range(ranks))]
        args += ["--nproc-per-node", str(ranks), str(JOB), storage, str(calls), "first" if first_step_only else "all"]
        t0 = time.time()
        p = subprocess.run(
            args, cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL
        )
        if p.returncode != 0:
            raise SystemExit(f"{mode}: exit {p.returncode}\n{p.stderr[-3000:]}")
        line = next(x for x in p.stdout.splitlines() if x.startswith("BENCH "))
        out = json.loads(line[len("BENCH ") :])
        return out, out["first_step_at"] - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    per_call = {}
    for mode in ("ray", "cluster"):
        per_call[mode], _ = run_job(mode, a.ranks, a.calls)
    launch: dict[str, list[float]] = {"ray": [], "cluster": []}
    for _ in range(a.launches):
        for mode in ("ray", "cluster"):
            launch[mode].append(run_job(mode, a.ranks, 1, first_step_only=True)[1])
    c, r = per_call["cluster"], per_call["ray"]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "ranks": a.ranks,
        "calls": a.calls,
        "cpus": os.cpu_count(),
        "report_ms": {"cluster": c["report_ms"], "ray": r["report_ms"]},
        "report_ckpt_ms": {"cluster": c["report_ckpt_ms"], "ray": r["report_ckpt_ms"], "copy": c["copy_ms"]},
        "report_ckpt_over_copy_ms": c["report_ckpt_ms"] - c["copy_ms"],
        "barrier_ms": {"cluster": c["barrier_ms"], "ray": r["barrier_ms"]},
        "broadcast_ms": {"cluster": c["broadcast_ms"], "ray": r["broadcast_ms"]},
        "launch_to_first_step_s": {m: statistics.median(v) for m, v in launch.items()},
        "launch_ratio": statistics.median(launch["cluster"]) / statistics.median(launch["ray"]),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
