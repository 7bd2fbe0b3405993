"""An unmodified multi-worker GPU script: 4 GPU workers. Under --force-local it must run in local mode."""

import os
import tempfile

import ray.train
import ray.train.torch
from ray.train import Checkpoint, RunConfig, ScalingConfig


def train_fn(config):
    ctx = ray.train.get_context()
    world = ctx.get_world_size()
    rank = ctx.get_world_rank()
    print(f"train_fn rank {rank} of {world}", flush=True)  # BREAKPOINT: train
    with tempfile.TemporaryDirectory() as d:  # Result.metrics are the last checkpoint's, as on a cluster
        ray.train.report({"rank": rank, "world": world}, checkpoint=Checkpoint.from_directory(d))


trainer = ray.train.torch.TorchTrainer(
    train_fn,
    scaling_config=ScalingConfig(num_workers=4, use_gpu=True),
    run_config=RunConfig(storage_path=os.environ.get("RTDEBUG_TEST_STORAGE")),
)
result = trainer.fit()
print(f"result metrics {result.metrics}", flush=True)
