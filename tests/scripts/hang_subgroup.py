"""A hang inside a subgroup made by ``new_group``: rank 1 skips the subgroup's all-reduce.

Ranks 0 and 1 share ``pair = new_group([0, 1])``. Rank 0 enters ``all_reduce(group=pair)``; rank 1 skips it
and, like rank 2, waits in the world's ``barrier()``: rank 0 waits for rank 1 in the subgroup, ranks 1-2
wait for rank 0 in the world.
"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pair = dist.new_group([0, 1])
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)  # a few world collectives first: every rank returns from them
if rank in (0, 1):
    dist.all_reduce(t, group=pair)  # every member returns from the first one
if rank == 0:
    dist.all_reduce(t, group=pair)  # SUBGROUP LINE: rank 1 never comes
print(f"rank {rank}: at the barrier", flush=True)
dist.barrier()  # BARRIER LINE
dist.destroy_process_group()
