"""FSDP2 (``fully_shard``) on CPU/gloo with a NaN in rank ``--nan-rank``'s batch at ``--nan-step``, for
``--stop-on nonfinite`` under FSDP: gradients are sharded DTensors, reduce-scattered by FSDP."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

p = argparse.ArgumentParser()
p.add_argument("--nan-rank", type=int, default=1)
p.add_argument("--nan-step", type=int, default=2)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--one-row", action="store_true", help="a NaN in row 0 of the first weight's grad only")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
steps_done = 0
for step in range(args.steps):
    x = torch.randn(4, 8)
    hook = None
    if rank == args.nan_rank and step == args.nan_step:
        if args.one_row:  # row 0 of the first weight's grad: in rank 0's shard only, the others stay finite

            def nan_row(module, inputs, out):
                out.register_hook(lambda g: g.index_fill(1, torch.tensor([0]), float("nan")))

            hook = model[0].register_forward_hook(nan_row)
        else:
            x[0, 0] = float("nan")
    loss = model(x).pow(2).mean()
    loss.backward()  # STOP BACKWARD
    if hook is not None:
        hook.remove()
    opt.step()
    opt.zero_grad()
    steps_done += 1
print(f"rank {rank}: trained {steps_done} steps", flush=True)
dist.destroy_process_group()
