"""One "rank" for tests/unit/test_stopon_units.py: ``together`` on a real TCPStore client, with the process group
replaced by what it reads (the store, the world, the rank, a step clock this script moves).

    together_rank.py PORT RANK WORLD DELAYS   (DELAYS: comma-separated seconds late to steps 10, 11, ...)

Prints the step it armed at (-1: never)."""

import sys
import time
import types

import torch.distributed

from rtdebug.rank.stopon import together

port, rank, world = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
delays = [float(d) for d in sys.argv[4].split(",")]
store = torch.distributed.TCPStore("127.0.0.1", port, None, False, wait_for_workers=False)
clock = {"seq": 0}
group = types.SimpleNamespace(_get_sequence_number_for_group=lambda: clock["seq"])
fake = types.SimpleNamespace(
    is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: rank, get_world_size=lambda: world,
    distributed_c10d=types.SimpleNamespace(_get_default_store=lambda: store, _get_default_group=lambda: group),
)  # fmt: skip
sys.modules["torch.distributed"] = fake  # together reads it from there, as in a rank
together.pending("g1")
store.add("started", 1)
while store.add("started", 0) < world:  # as the job's collectives keep real ranks within a step of each other
    time.sleep(0.01)
for i, delay in enumerate(delays):
    clock["seq"] = 10 + i
    time.sleep(delay)
    if together.meet():
        print(10 + i, flush=True)
        sys.exit(0)
print(-1, flush=True)
