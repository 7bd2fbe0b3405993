"""A c10d job for connect's bench: every rank all_reduces as fast as it can until a stop file appears;
rank 0 writes ``<dir>/steps`` (wall time and step count) a few times a second, so the bench reads the
job's speed from outside. The ranks agree on the stop (an all_reduce of the flag), so every rank ends at
the same step and the job exits 0. ``never`` holds the line a breakpoint is set on that no rank ever runs.

    python connect_steps.py DIR [SLEEP]

SLEEP (seconds, default 0) is slept after each step: a job that leaves the CPUs some room.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

DIR = sys.argv[1]
SLEEP = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0


def never() -> None:
    pass  # BREAKPOINT: never


dist.init_process_group("gloo")
torch.set_num_threads(1)
rank = dist.get_rank()
t = torch.ones(64)
step, last = 0, 0.0
stop = os.path.join(DIR, "stop")
while True:
    if step % 50 == 0:
        flag = torch.tensor([float(os.path.exists(stop))])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            break
    dist.all_reduce(t)
    step += 1  # BREAKPOINT: connect step
    if SLEEP:
        time.sleep(SLEEP)
    now = time.time()
    if rank == 0 and now - last > 0.25:
        last = now
        tmp = os.path.join(DIR, ".steps")
        with open(tmp, "w") as f:
            f.write(f"{now} {step}\n")
        os.replace(tmp, os.path.join(DIR, "steps"))
dist.destroy_process_group()
