"""A 2-rank DDP job (CPU, gloo, a tiny model) for all-stop with a rank blocked in C++: DDP's gradient
all-reduce runs inside ``loss.backward()``, issued from C++ where the collective wrapper never sees it.

From step 3 rank 1 sleeps before its backward, so that rank 0 is blocked in that all-reduce, then runs the
tests' breakpoint line (its own, before its backward). The ranks step until the file ``argv[1]`` exists (they
agree on it in a Python all_reduce at the end of each step, so they end at the same step), print their step
count and exit 0."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
done = sys.argv[1]
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 8)
step = 0
while True:
    step += 1
    loss = model(x).square().mean()  # BREAKPOINT: forward
    if rank == 1 and step >= 3:
        time.sleep(0.5)  # rank 0 is in its backward meanwhile, blocked in DDP's all-reduce (C++)
        mine = step  # BREAKPOINT: rank 1 before its backward
    loss.backward()  # BREAKPOINT: backward
    opt.step()  # BREAKPOINT: after backward
    opt.zero_grad()
    flag = torch.tensor([float(os.path.exists(done))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        break
    time.sleep(0.02)
print(f"rank {rank} ended after {step} steps", flush=True)
dist.destroy_process_group()
