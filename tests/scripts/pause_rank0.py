"""Rank 0 sleeps inside a collective step; its peer waits in all_reduce meanwhile.

The process group is created by Ray's LocalTorchController (no timeout given),
so only the harness's raised default decides whether rank 1 times out.
"""

import sys
import time

import ray.train
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

PAUSE_S = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0


def train_func():
    rank = ray.train.get_context().get_world_rank()
    t = torch.ones(1)
    if rank == 0:
        time.sleep(PAUSE_S)  # stands in for a rank paused at a breakpoint
    dist.all_reduce(t)
    print(f"rank {rank} all_reduce ok: {t.item()}", flush=True)
    ray.train.report({"sum": t.item()})


result = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=0)).fit()
print(f"metrics {result.metrics}", flush=True)  # one write: ranks share the output
