"""A c10d job step loop for the multi-node test: every rank all_reduces until a stop file appears.

HOST is the address this process uses toward the rendezvous host, derived from a
socket inside the rank (so it names the network namespace the rank runs in).
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist

STOP = sys.argv[1]
dist.init_process_group("gloo")
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.connect((os.environ["MASTER_ADDR"], 9))
    HOST = s.getsockname()[0]
rank = dist.get_rank()
print(f"rank {rank} on {HOST} started", flush=True)
step = 0
while not os.path.exists(STOP):
    t = torch.ones(1)
    dist.all_reduce(t)
    step += 1  # BREAKPOINT: multinode step
    time.sleep(0.05)
print(f"rank {rank} on {HOST} done after {step} steps", flush=True)
dist.destroy_process_group()
