"""A Ray Train hang with uneven data under DDP (``prepare_model``): 2 workers on CPU/gloo, rank 0 has one
batch more, then every worker calls ``dist.barrier()``. Rank 0 sits in DDP's gradient all-reduce, issued
from C++ during ``backward()``, which rank 1 never enters. ``--slot R``: each worker needs one R."""

import argparse

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.train import ScalingConfig
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--slot", default=None)
args = p.parse_args()


def train_fn(config):
    rank = ray.train.get_context().get_world_rank()
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4 + (1 if rank == 0 else 0)):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()  # BACKWARD LINE
        opt.step()
        opt.zero_grad()
    print(f"worker rank {rank} at the barrier", flush=True)
    dist.barrier()  # BARRIER LINE


ray.init()
resources = {"CPU": 0.5, args.slot: 1} if args.slot else {"CPU": 0.5}
trainer = ray.train.torch.TorchTrainer(
    train_fn,
    scaling_config=ScalingConfig(num_workers=2, resources_per_worker=resources),
    run_config=ray.train.RunConfig(storage_path=__import__("os").environ.get("RTDEBUG_TEST_STORAGE")),
)
trainer.fit()
