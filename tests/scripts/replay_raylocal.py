"""Ray Train local mode under torchrun (``ScalingConfig(num_workers=0)``) for tests/e2e/test_replay.py:
``replay_raylocal.py STORAGE``. Each rank writes to ``$OUT/lines-R.txt`` what rank 0 broadcast, the
checkpoint directory the ranks agreed on in ``report()``, and an all_reduce of its own process group.
"""

import os
import random
import sys
import tempfile

import ray.train
import ray.train.collective
import torch
import torch.distributed as dist
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_fn() -> None:
    rank = ray.train.get_context().get_world_rank()
    lines = open(os.path.join(os.environ["OUT"], f"lines-{rank}.txt"), "w")  # noqa: SIM115
    got = ray.train.collective.broadcast_from_rank_zero({"from": rank, "r": random.random()})
    print(f"rank {rank} broadcast {got!r}", file=lines, flush=True)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    ray.train.collective.barrier()
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
            f.write("weights")
        ray.train.report({"loss": 0.5, "rank": rank}, checkpoint=Checkpoint.from_directory(d))
    found = ray.train.get_checkpoint()
    print(f"rank {rank} all_reduce {t.item()!r} checkpoint {os.path.basename(found.path)}", file=lines, flush=True)


TorchTrainer(
    train_fn,
    scaling_config=ScalingConfig(num_workers=0),
    run_config=RunConfig(name="replay-run", storage_path=sys.argv[1]),
).fit()
