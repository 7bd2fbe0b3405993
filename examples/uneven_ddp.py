"""The most common real DDP hang: one rank's shard has one batch more than the others.

    rtdebug torchrun --nproc-per-node 3 examples/uneven_ddp.py            # hangs; rtdebug stacks says why
    rtdebug torchrun --nproc-per-node 3 examples/uneven_ddp.py --join     # DDP's join(): it finishes

Rank 0 runs ``EXTRA`` (default 1) more backward passes than the others. Each backward makes DDP all-reduce
the gradients from C++, so rank 0 sits in an all-reduce that ranks 1-2, gone on to ``dist.barrier()``,
never enter. The collectives are issued by DDP's reducer, not from Python: only torch's Flight Recorder
sees them, which is what ``rtdebug stacks`` reads. CPU and gloo; synthetic data.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=6)
parser.add_argument("--extra", type=int, default=int(os.environ.get("EXTRA", "1")))
parser.add_argument("--join", action="store_true", help="wrap the loop in DDP's join(): the uneven ranks finish")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [torch.randn(8, 16) for _ in range(args.batches + (args.extra if rank == 0 else 0))]


def train():
    for x in batches:
        loss = model(x).pow(2).mean()
        loss.backward()  # BACKWARD LINE: DDP all-reduces the gradient buckets here, from C++
        opt.step()
        opt.zero_grad()


if args.join:
    with model.join():
        train()
else:
    train()
print(f"rank {rank}: trained on {len(batches)} batches", flush=True)
dist.barrier()  # BARRIER LINE
dist.destroy_process_group()
