"""One process with a process group of its own (``rtdebug run --capture``): an all_reduce and an object broadcast
of a value from ``random`` (whose initial state a capsule restores)."""

import os
import random
import socket

import torch
import torch.distributed as dist

s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.arange(4.0)
dist.all_reduce(t)
objects = [{"lr": 0.1, "seed": random.randint(0, 10**9)}]
dist.broadcast_object_list(objects)
print(f"single sum {t.sum().item()} objects {objects}", flush=True)
print(f"scratch: {os.environ.get('RTDEBUG_REPLAY_SCRATCH')}", flush=True)
dist.destroy_process_group()
