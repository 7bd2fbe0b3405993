"""The job ``bench/probes/raylocal_bench.py`` times: ``raylocal_job.py STORAGE CALLS all|first`` under rtdebug torchrun.

Each rank times CALLS calls of report() (no checkpoint), report() with a 1 MiB checkpoint, barrier() and
broadcast_from_rank_zero(), after a warm-up; rank 0 prints ``BENCH {json}`` with the medians in ms, the
copy's own cost (copytree of the same files into the same storage) and the wall time of its first step.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and (len(sys.argv) != 4 or sys.argv[1] in ("-h", "--help")):  # before Ray's import
    print(__doc__)
    sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)

import json
import os
import shutil
import statistics
import tempfile
import time

import ray.train
import ray.train.collective
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

STORAGE, CALLS, WHAT = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def timed(fn, n: int) -> float:
    fn()  # warm-up
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1000)
    return statistics.median(xs)


def train_fn():
    first_step_at = time.time()
    rank = ray.train.get_context().get_world_rank()
    out = {"first_step_at": first_step_at}
    if WHAT == "all":
        src = tempfile.mkdtemp()
        with open(os.path.join(src, f"rank{rank}.bin"), "wb") as f:
            f.write(os.urandom(1 << 20))
        out["report_ms"] = timed(lambda: ray.train.report({"rank": rank}), CALLS)
        n_ckpt = max(10, CALLS // 10)
        out["report_ckpt_ms"] = timed(
            lambda: ray.train.report({"r": rank}, checkpoint=Checkpoint.from_directory(src)), n_ckpt
        )
        copies = []

        def copy() -> None:
            d = os.path.join(STORAGE, "copy", f"{rank}-{len(copies)}")
            copies.append(d)
            shutil.copytree(src, d)

        out["copy_ms"] = timed(copy, n_ckpt)
        out["barrier_ms"] = timed(ray.train.collective.barrier, CALLS)
        out["broadcast_ms"] = timed(lambda: ray.train.collective.broadcast_from_rank_zero({"seed": 1}), CALLS)
    if rank == 0:
        print("BENCH " + json.dumps(out), flush=True)


TorchTrainer(
    train_fn,
    scaling_config=ScalingConfig(num_workers=0),
    run_config=RunConfig(storage_path=STORAGE, name="bench", checkpoint_config=CheckpointConfig(num_to_keep=2)),
).fit()
