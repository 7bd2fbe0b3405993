"""One process, a world-size-1 gloo group, the collective record armed: what the wrapper keeps and passes on.

Prints one JSON line for tests/e2e/test_collrec.py: the record after each call, and what the wrapped
functions returned or raised (async work, return values, exceptions, a torch.compile'd caller).
"""

import inspect
import json
import os
import sys

from rtdebug.rank.collectives import recorder as collrec

field = collrec.arm(sys.argv[1], 0)

import torch  # noqa: E402  (after arm: the patch applies when torch.distributed is imported)
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

out = {"field": field, "before": collrec.snapshot()}
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}/store", rank=0, world_size=1)
out["wrapped"] = dist.all_reduce is c10d.all_reduce and hasattr(dist.all_reduce, "__rtdebug_collrec__")
out["signature"] = str(inspect.signature(dist.all_reduce)) == str(inspect.signature(dist.all_reduce.__wrapped__))
t = torch.ones(3, 2)
out["ret_sync"] = repr(dist.all_reduce(t))  # BREAKPOINT: collrec sync
out["after_sync"] = collrec.snapshot()
work = c10d.all_reduce(t, async_op=True)
out["async_type"] = type(work).__name__
work.wait()
out["after_async"] = collrec.snapshot()
dist.barrier()
out["after_barrier"] = collrec.snapshot()
try:
    dist.broadcast(t, src=5)  # rank 5 does not exist: torch raises
    out["raised"] = None
except Exception as exc:  # noqa: BLE001
    out["raised"] = type(exc).__name__
out["after_raise"] = collrec.snapshot()
group = dist.new_group([0])
dist.all_reduce(torch.zeros(2, dtype=torch.int64), group=group)
out["after_group"] = collrec.snapshot()


def step(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1


out["compiled"] = torch.compile(step, backend="eager")(torch.ones(2)).tolist()
# a collective called straight from C (a thread whose first Python frame is the wrapper): no call site, no error
import _thread  # noqa: E402
import time  # noqa: E402

_thread.start_new_thread(dist.all_reduce, (torch.ones(1),))
for _ in range(500):
    s = collrec.snapshot()
    if s and s["shapes"] == "[1]" and s["state"] == "returned":
        break
    time.sleep(0.01)
out["from_c"] = collrec.snapshot()
out["file_record"] = collrec.collseq.read(os.path.join(sys.argv[1], "coll-0.bin"))
if field is not None:  # (record off: plain torch, whose gloo coalescing aborts this process at exit)
    with c10d._coalescing_manager():  # coalesced calls are queued and launched together: each one counted
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.full((3,), 2.0))
out["coalesced"] = collrec.snapshot() if field is not None else None


def alternate():  # one call site, shapes that change back and forth: the cached static block follows them
    seen = []
    for n in (2, 3, 2):
        dist.all_reduce(torch.ones(n))  # BREAKPOINT: collrec alternate
        seen.append([collrec.snapshot()["shapes"], collrec.collseq.read(os.path.join(sys.argv[1], "coll-0.bin"))])
    dist.all_reduce(torch.ones(1), dist.ReduceOp.SUM, group)  # BREAKPOINT: collrec positional group
    seen.append(collrec.snapshot())
    dist.barrier(group)
    seen.append(collrec.snapshot())
    return seen


out["alternate"] = alternate() if field is not None else None
dist.destroy_process_group()
out["cached_after_destroy"] = len(collrec._static)  # the cache lets go of the groups torch destroyed
print("RESULT " + json.dumps(out), flush=True)
