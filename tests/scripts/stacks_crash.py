"""Rank 1 raises; rank 0 is already waiting in an all_reduce that rank 1 never joins."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def step(t):
    if rank == 1:
        raise ZeroDivisionError(f"bad batch in rank {rank}")  # BREAKPOINT: crash raise
    dist.all_reduce(t)  # BREAKPOINT: crash all_reduce


step(torch.ones(2))
