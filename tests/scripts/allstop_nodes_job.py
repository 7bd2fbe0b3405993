"""A c10d job for all-stop across nodes: every rank all_reduces in a loop; the last rank (on the last node) has
a line of its own for a breakpoint. The ranks leave together, once any of them sees the stop file (the flag
goes through the all_reduce, so no rank is left alone in a collective)."""

import os
import sys
import time

import torch
import torch.distributed as dist

STOP = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} started", flush=True)
step = 0
while True:
    t = torch.tensor([1.0 if os.path.exists(STOP) else 0.0])
    dist.all_reduce(t)
    if t.item() > 0:
        break
    step += 1
    if rank == world - 1:
        last = step  # BREAKPOINT: the last rank only
    for _ in range(20):  # the others are here when the last rank stops: back in Python every 10 ms, where
        time.sleep(0.01)  # a pause lands (the latency measured is all-stop's, not a long C call's)
print(f"rank {rank} ended after {step} steps", flush=True)
dist.destroy_process_group()
