"""Rank 1 raises; rank 0 is already waiting in an all_reduce that rank 1 never joins."""

import atexit
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 1:
    # A slow exit, as a real job's teardown often is. The launcher dumps the others within ~0.1 s of the
    # failure being recorded, racing torchrun's own 0.1 s monitor; this keeps that race out of a loaded CI.
    atexit.register(time.sleep, 2)


def step(t):
    if rank == 1:
        raise ZeroDivisionError(f"bad batch in rank {rank}")  # BREAKPOINT: crash raise
    dist.all_reduce(t)  # BREAKPOINT: crash all_reduce


step(torch.ones(2))
