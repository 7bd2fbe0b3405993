"""A small DDP training job (CPU, gloo) with faults on demand, for ``--stop-on`` (tests/e2e/test_stopon.py).

    --nan-rank R --nan-step S        a NaN in rank R's batch at step S (its loss and grads go non-finite)
    --inf-loss-rank R --inf-loss-step S   an Inf added to rank R's loss only (its grads stay finite)
    --overflow-step S                every rank's grads finite but large, summed in fp16 (the user's own
                                     fp16_compress_hook): they overflow only in the all-reduce
    --perturb-rank R --perturb-step S  rank R changes fc1.weight after step S (replicas disagree)
    --no-ddp                         a single process, no DDP (rtdebug run)
    --noop-hook                      DDP's noop_hook: nothing is reduced, each rank keeps its own gradients
    --accumulate K                   K micro-batches per step, all but the last under DDP's no_sync()
    --inf-micro M                    with --inf-loss-*: the Inf goes into micro-batch M of that step

``step`` is the loop's step and ``steps_done`` the optimizer steps taken: at a stop before the optimizer
changes the weights, both are the same number.
"""

import argparse
import contextlib

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--nan-rank", type=int, default=-1)
p.add_argument("--nan-step", type=int, default=-1)
p.add_argument("--inf-loss-rank", type=int, default=-1)
p.add_argument("--inf-loss-step", type=int, default=-1)
p.add_argument("--overflow-step", type=int, default=-1)
p.add_argument("--perturb-rank", type=int, default=-1)
p.add_argument("--perturb-step", type=int, default=-1)
p.add_argument("--no-ddp", action="store_true")
p.add_argument("--accumulate", type=int, default=1)
p.add_argument("--noop-hook", action="store_true", help="DDP's noop_hook: no rank's gradients are reduced")
p.add_argument("--inf-micro", type=int, default=0)
args = p.parse_args()

ddp = not args.no_ddp
if ddp:
    dist.init_process_group("gloo")
rank = dist.get_rank() if ddp else 0
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


net = Net()
model = nn.parallel.DistributedDataParallel(net) if ddp else net
if ddp and args.overflow_step >= 0:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model.register_comm_hook(None, default_hooks.fp16_compress_hook)  # the user's own hook
if ddp and args.noop_hook:
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks

    model.register_comm_hook(None, debugging_hooks.noop_hook)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
steps_done = 0
torch.manual_seed(1 + rank)
for step in range(args.steps):
    for micro in range(args.accumulate):
        last = micro == args.accumulate - 1
        with contextlib.nullcontext() if last or not ddp else model.no_sync():
            x = torch.randn(4, 8)
            if rank == args.nan_rank and step == args.nan_step:
                x[0, 0] = float("nan")
            loss = model(x).pow(2).mean()
            if rank == args.inf_loss_rank and step == args.inf_loss_step and micro == args.inf_micro:
                loss = loss + float("inf")
            if step == args.overflow_step:
                loss = loss * 3e5  # grads ~1e5 each: finite in fp32, their fp16 sum over 3 ranks is not
            loss.backward()  # STOP BACKWARD
    opt.step()  # STOP STEP
    opt.zero_grad()
    steps_done += 1
    if rank == args.perturb_rank and step == args.perturb_step:
        with torch.no_grad():
            net.fc1.weight[0, 0] += 1e-3
finite = all(bool(torch.isfinite(p).all()) for p in net.parameters())
print(f"rank {rank}: trained {steps_done} steps; weights finite: {finite}", flush=True)
if ddp:
    dist.destroy_process_group()
