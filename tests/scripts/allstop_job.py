"""Ranks step through ``all_reduce`` until the file ``argv[1]`` exists (they agree on it in the collective, so
they end at the same step); rank 1 has a line only it runs, the tests' breakpoint, and gets there while the
others still sleep after the last collective. Each rank prints its step
count at the end, and exits 0."""

import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
done = sys.argv[1]
step = 0
while True:
    step += 1
    if rank == 1 and step >= 3:
        mine = step  # BREAKPOINT: rank 1 only
    flag = torch.tensor([float(os.path.exists(done))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # BREAKPOINT: collective
    if flag.item() > 0:
        break
    time.sleep(0.02 if rank == 1 else 0.25)  # the others are in Python, not in the collective, when rank 1 stops
print(f"rank {rank} ended after {step} steps", flush=True)
dist.destroy_process_group()
