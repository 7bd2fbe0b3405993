"""Ranks (2 or more) loop over the collectives a user steps over or into: a helper that all-reduces and then
works (rank 0 works ``WORK_S``, the others none), a barrier, an all_gather, a sub-group all_reduce on ranks 0
and 1 (the others skip it), and an all_reduce on the file ``argv[1]`` (they agree on it, so they end at the same
step). Rank 1 has a line only it runs, the tests' breakpoint. Each rank prints its step count at the end, and
exits 0."""

import os
import sys
import time

import torch
import torch.distributed as dist

WORK_S = 1.5  # rank 0's work after the helper's all_reduce: longer than all-stop's STEP_ALONE_S


def reduce_then_work(t, work_s):
    dist.all_reduce(t)  # BREAKPOINT: inside
    time.sleep(work_s)  # BREAKPOINT: work
    return t  # BREAKPOINT: return


dist.init_process_group("gloo")
rank = dist.get_rank()
world = dist.get_world_size()
pair = dist.new_group([0, 1])
done = sys.argv[1]
step = 0
while True:
    step += 1
    if rank == 1 and step >= 3:
        mine = step  # BREAKPOINT: rank 1 only
    t = reduce_then_work(torch.ones(1), WORK_S if rank == 0 else 0.0)  # BREAKPOINT: call
    dist.barrier()  # BREAKPOINT: barrier
    parts = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([float(rank)]))  # BREAKPOINT: gather
    if rank in (0, 1):
        dist.all_reduce(t, group=pair)  # BREAKPOINT: pair
    flag = torch.tensor([float(os.path.exists(done))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # BREAKPOINT: collective
    if flag.item() > 0:
        break
    time.sleep(0.02 if rank == 1 else 0.25)  # BREAKPOINT: sleep
print(f"rank {rank} ended after {step} steps", flush=True)
dist.destroy_process_group()
