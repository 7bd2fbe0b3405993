"""A real FSDP2 hang on CPU/gloo: rank ``--skip`` (default 1) skips one forward/backward step.

Every other rank's FSDP all-gathers and reduce-scatters (issued by FSDP, not by the user's code) then
wait for it, while it runs on to ``dist.barrier()``.
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--skip", type=int, default=1)
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    if rank == args.skip and step == args.steps - 1:
        continue  # SKIP LINE: this rank skips the last step
    loss = model(torch.randn(4, 16)).sum()  # FORWARD LINE
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"rank {rank}: done", flush=True)
dist.barrier()  # BARRIER LINE
dist.destroy_process_group()
