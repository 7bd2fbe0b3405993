"""rtdebug.breakpoint(rank=1): only rank 1 stops; the others carry on."""

import torch.distributed as dist

import rtdebug

dist.init_process_group("gloo")
rank = dist.get_rank()
value = rank * 10
stopped = rtdebug.breakpoint(rank=1, timeout=60)
print(f"rank {rank} breakpoint returned {stopped}", flush=True)
