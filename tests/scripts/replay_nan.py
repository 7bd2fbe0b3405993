"""2-rank DDP (gloo) where rank 1's batch holds a NaN at step ``NAN_STEP`` (default 3): for the replay tests.

Each rank writes ``rank R step S ysum Y loss L`` to ``$OUT/lines-R.txt`` (``ysum``: its own shard's targets).
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
lines = open(os.path.join(os.environ["OUT"], f"lines-{rank}.txt"), "w")  # noqa: SIM115
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(7 + rank)
for step in range(6):
    x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 1, generator=gen)
    if rank == 1 and step == int(os.environ.get("NAN_STEP", "3")):
        x[2, 1] = float("nan")
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()  # replay-marker: backward
    opt.step()
    print(f"rank {rank} step {step} ysum {float(y.sum())!r} loss {loss.item()!r}", file=lines, flush=True)
dist.destroy_process_group()
