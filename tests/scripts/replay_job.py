"""A 2- or 4-rank gloo job for tests/e2e/test_replay.py: DDP steps, then one of each other collective.

Prints each value a rank computes or receives as ``rank R <what> <repr>`` lines, so a replay's output can be
compared line for line with the job's, and saves the final parameters to ``$OUT/params-R.pt``. ``LR``
(default 0.1) is what a test edits; ``EXTRA=1`` makes one more collective than a capture of the plain job.
"""

import os
import random
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
lines = open(os.path.join(os.environ["OUT"], f"lines-{rank}.txt"), "w")  # noqa: SIM115


def say(what: str) -> None:
    """One value this rank computed or received: to its own file (ranks' stdout lines interleave)."""
    print(f"rank {rank} {what}", file=lines, flush=True)
    print(f"rank {rank} {what}", file=sys.stdout, flush=True)


torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(4):
    x, y = torch.randn(32, 8, generator=gen), torch.randn(32, 1, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()  # replay-marker: backward
    opt.step()
    say(f"step {step} loss {loss.item()!r}")

say(f"random {random.random()!r}")  # unseeded: the capsule's RNG state
objs = [{"from": rank, "r": random.random()} if rank == 0 else None]
dist.broadcast_object_list(objs, src=0)
say(f"broadcast_object {objs[0]!r}")
gathered: list = [None] * world
dist.all_gather_object(gathered, {"rank": rank, "sq": rank * rank})
say(f"all_gather_object {gathered!r}")
dist.barrier()
t = torch.arange(world * 2, dtype=torch.float64) + 10 * rank
out = torch.empty_like(t)
dist.all_to_all_single(out, t)
say(f"all_to_all_single {out.tolist()!r}")
if rank % 2 == 0:
    dist.send(torch.tensor([rank + 0.5]), dst=rank + 1)
else:
    got = torch.zeros(1)
    dist.recv(got, src=rank - 1)
    say(f"recv {got.tolist()!r}")
whole = torch.empty(world * 3, dtype=torch.int32)
dist.all_gather_into_tensor(whole, torch.full((3,), rank, dtype=torch.int32))
part = torch.empty(2)
dist.reduce_scatter_tensor(part, torch.arange(world * 2, dtype=torch.float32) * (rank + 1))
say(f"all_gather_into_tensor {whole.tolist()!r} reduce_scatter_tensor {part.tolist()!r}")
pairs = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
mine = pairs[rank // 2]
s = torch.tensor([float(rank + 1)])
dist.all_reduce(s, group=mine)
say(f"subgroup all_reduce {s.item()!r}")
final = torch.tensor([float(os.environ.get("LR", "0.1"))])
dist.all_reduce(final)  # replay-marker: final
say(f"final {final.item()!r}")
if os.environ.get("EXTRA") == "1":
    dist.all_reduce(torch.ones(2))  # replay-marker: extra
torch.save(model.module.state_dict(), os.path.join(os.environ["OUT"], f"params-{rank}.pt"))
dist.destroy_process_group()
