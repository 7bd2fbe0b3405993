"""FSDP2 (``fully_shard``) on the ``dp`` dimension of a 2x2 DeviceMesh, and an all_reduce on ``tp``: gloo, CPU.

For tests/e2e/test_replay.py: each rank writes its losses and what its ``tp`` all_reduce returned to
``$OUT/lines-R.txt`` and its parameter shards to ``$OUT/params-R.pt``.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
lines = open(os.path.join(os.environ["OUT"], f"lines-{rank}.txt"), "w")  # noqa: SIM115
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(3):
    loss = model(torch.randn(16, 8, generator=gen)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    t = torch.tensor([loss.item()])
    dist.all_reduce(t, group=mesh["tp"].get_group())
    print(f"rank {rank} step {step} loss {loss.item()!r} tp {t.item()!r}", file=lines, flush=True)
shards = {k: v.to_local().clone() for k, v in model.state_dict().items()}
torch.save(shards, os.path.join(os.environ["OUT"], f"params-{rank}.pt"))
dist.destroy_process_group()
