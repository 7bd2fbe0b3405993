"""A small 2-rank DDP job for the replay CLI tests: prints each step's loss per rank.

``STEPS`` (default 3) steps; ``PAYLOAD`` floats all-reduced once per step besides DDP's buckets (to fill a
capture quickly); ``EXTRA=1`` makes one more collective at the end than a capture of the plain job holds.
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
payload = int(os.environ.get("PAYLOAD", "0"))
for step in range(int(os.environ.get("STEPS", "3"))):
    loss = model(torch.randn(8, 4, generator=gen)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if payload:
        dist.all_reduce(torch.full((payload,), float(rank + step)))
    print(f"rank {rank} step {step} loss {loss.item():.8f}", flush=True)  # BREAKPOINT: replay step
if os.environ.get("EXTRA") == "1":
    dist.all_reduce(torch.ones(2))
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
