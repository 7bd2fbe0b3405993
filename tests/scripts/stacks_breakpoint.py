"""Rank 1 stops at a breakpoint in ``work``; rank 0 waits for it in a barrier."""

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def work():
    value = rank * 10
    return value + 1  # BREAKPOINT: stacks bp


if rank == 1:
    work()
dist.barrier()  # BREAKPOINT: stacks barrier
print(f"rank {rank} passed the barrier", flush=True)
