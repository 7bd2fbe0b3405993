"""A healthy DDP job (CPU, gloo) that trains as fast as it can and never stops: hundreds of collectives a second.

    argv[1]          a file where the loop writes its step count (every 50 steps)
    --loss-reduce    also all-reduce the loss from Python each step (the collective record sees that one;
                     DDP's gradient all-reduce is issued from C++ and only torch's Flight Recorder sees it)

What ``rtdebug stacks`` must call progressing, never a hang (tests/e2e/test_stacks_moving.py).
"""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(4, 8), torch.randn(4, 1)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
step = 0
while True:
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()  # DDP's gradient all-reduce, from C++
    opt.step()
    if "--loss-reduce" in sys.argv:
        dist.all_reduce(loss.detach())
    step += 1
    if step % 50 == 0:
        os.pwrite(fd, b"%12d\n" % step, 0)
