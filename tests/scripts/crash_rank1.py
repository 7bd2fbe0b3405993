"""Rank 1 raises in its train step; used for --post-mortem."""

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def step(batch):
    scale = 0 if rank == 1 else 1
    if scale == 0:
        raise ZeroDivisionError(f"bad batch {batch} in rank {rank}")  # RAISE SITE
    return batch / scale


for b in range(3):
    step(b)
print(f"rank {rank} done", flush=True)
