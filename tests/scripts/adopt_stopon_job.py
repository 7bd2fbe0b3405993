"""A plain gloo DDP job for `rtdebug adopt --stop-on` (tests/e2e/test_adopt_stopon.py), started WITHOUT rtdebug:
trains until CONTROL appears (every rank leaves at the same step: the stop flag rides an all_reduce).
Rank 1 feeds a NaN into its batch once CONTROL.nan exists and rtdebug's nonfinite is in force here (set on
a running job, it comes into force on every rank at one step)."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def armed() -> bool:
    arm = sys.modules.get("rtdebug.rank.stopon.arm")
    return arm is not None and "nonfinite" in arm.armed()


def main() -> None:
    control = Path(sys.argv[1])
    nan = Path(str(control) + ".nan")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    print(f"rank {rank} running", flush=True)
    poisoned = False
    step = 0
    while True:
        flag = torch.tensor([float(control.exists())])
        dist.all_reduce(flag)
        if flag.item() > 0:
            break
        x = torch.randn(4, 8)
        if rank == 1 and not poisoned and nan.exists() and armed():
            x[0, 0] = float("nan")
            poisoned = True
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # STOP BACKWARD
        opt.step()  # STOP STEP
        step += 1
        time.sleep(0.01)
    print(f"rank {rank}: done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.pop("RTDEBUG_SESSION", None)
    main()
