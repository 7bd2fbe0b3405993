"""One train function that uses what local mode must keep of the cluster, run on a Ray cluster
(``--workers 2 --address A``) or in local mode under ``rtdebug torchrun --nproc-per-node 2`` (``--workers 0``).

Each rank writes what it observed to ``OUT/rank-<r>-run<k>.json``; the callback (in the controller on a
cluster, in one process here) writes ``OUT/callback-run<k>-<pid>.json``; the driver (every rank in local mode)
writes ``OUT/result-run<k>-<pid>.json``. ``tests/e2e/test_raylocal_parity.py`` compares the two.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import ray
import ray.train
import ray.train.collective
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.train.v2.api.callback import UserCallback

REPORTS = 3


class Recorder(UserCallback):
    def __init__(self, out: str, run: int) -> None:
        self.out, self.run, self.reports, self.metrics = out, run, 0, []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports += 1
        self.metrics.append([m.get("rank") for m in metrics])
        with open(os.path.join(self.out, f"callback-run{self.run}-{os.getpid()}.json"), "w") as f:
            json.dump({"reports": self.reports, "ranks": self.metrics, "checkpoint": checkpoint is not None}, f)


def train_fn(config):
    out, run = config["out"], config["run"]
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    obs = {"rank": rank, "world": ctx.get_world_size()}
    start = ray.train.get_checkpoint()
    obs["start_files"] = sorted(os.listdir(start.path)) if start else None
    obs["start_name"] = os.path.basename(start.path) if start else None
    # barrier: rank 0 writes, everyone reads after the barrier
    marker = os.path.join(out, f"marker-run{run}")
    if rank == 0:
        time.sleep(0.5)
        with open(marker, "w") as f:
            f.write("rank 0 was here")
    ray.train.collective.barrier()
    obs["marker_after_barrier"] = os.path.exists(marker)
    obs["broadcast"] = ray.train.collective.broadcast_from_rank_zero({"seed": 1000 + rank})
    shard = ray.train.get_dataset_shard("train") if config["data"] else None
    if shard is not None:
        ids = []
        for batch in shard.iter_batches(batch_size=8):
            ids += [int(x) for x in batch["id"]]
        obs["shard"] = ids
        obs["shard_epoch2"] = sum(len(b["id"]) for b in shard.iter_batches(batch_size=8))
    names = []
    for step in range(REPORTS):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
                f.write(f"run {run} step {step}")
            ray.train.report({"rank": rank, "step": step, "run": run}, checkpoint=Checkpoint.from_directory(d))
        names.append(os.path.basename(ray.train.get_checkpoint().path))
    obs["names"] = names
    ray.train.report({"rank": rank, "final": True})  # no checkpoint: Result.metrics stay the last checkpoint's
    history = ray.train.get_all_reported_checkpoints()
    obs["history"] = [[os.path.basename(h.checkpoint.path), h.metrics.get("run")] for h in history]
    try:
        obs["storage"] = os.path.basename(ctx.get_storage().experiment_fs_path)
    except NotImplementedError:  # Ray's own local mode
        obs["storage"] = None
    with open(os.path.join(out, f"rank-{rank}-run{run}.json"), "w") as f:
        json.dump(obs, f)


def metrics_only_fn(config):
    """Ray's local-mode guide's first example, in short: reports with metrics, none with a checkpoint."""
    for step in range(3):
        ray.train.report({"loss": 1.0 / (step + 1)})


def metrics_only(a: argparse.Namespace) -> None:
    """``Result.metrics`` after reports without a checkpoint: None on a cluster (Ray's own local mode: the last
    report's); written to ``OUT/metrics-only-<pid>.json``."""
    trainer = TorchTrainer(
        metrics_only_fn,
        scaling_config=ScalingConfig(num_workers=a.workers),
        run_config=RunConfig(storage_path=a.storage, name="parity-metrics-only"),
    )
    result = trainer.fit()
    with open(os.path.join(a.out, f"metrics-only-{os.getpid()}.json"), "w") as f:
        json.dump({"metrics": result.metrics, "checkpoint": result.checkpoint is not None}, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--address")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pass", dest="run", type=int, required=True)
    ap.add_argument("--data", action="store_true")
    ap.add_argument("--metrics-only", choices=("also", "only"), help="the fit() of reports without a checkpoint")
    a = ap.parse_args()
    if a.address:
        ray.init(address=a.address)
    if a.metrics_only == "only":
        metrics_only(a)
        return
    datasets = {"train": ray.data.range(40)} if a.data else None
    trainer = TorchTrainer(
        train_fn,
        train_loop_config={"out": a.out, "run": a.run, "data": a.data},
        scaling_config=ScalingConfig(num_workers=a.workers),
        run_config=RunConfig(
            storage_path=a.storage,
            name="parity",
            callbacks=[Recorder(a.out, a.run)],
            checkpoint_config=CheckpointConfig(num_to_keep=None),
        ),
        datasets=datasets,
    )
    result = trainer.fit()
    exists = bool(result.checkpoint and os.path.isdir(result.checkpoint.path))
    files = sorted(os.listdir(result.checkpoint.path)) if exists else None
    summary = {
        "path": os.path.basename(result.path) if result.path else None,
        "checkpoint_exists": exists,
        "checkpoint_files": files,
        "metrics_keys": sorted(result.metrics) if result.metrics else None,
        "best": len(result.best_checkpoints or []),
        "error": repr(result.error) if result.error else None,
    }
    with open(os.path.join(a.out, f"result-run{a.run}-{os.getpid()}.json"), "w") as f:
        json.dump(summary, f)
    if a.metrics_only == "also":  # a second fit() of the same job
        metrics_only(a)


if __name__ == "__main__":
    main()
