"""A 4-rank job with DeviceMeshes on CPU/gloo, for mesh selectors (tests/e2e/test_meshes.py).

    --layout 2d        a 2x2 mesh (dp, tp)
    --layout titan     torchtitan-style: (dp_shard, cp) = (2, 2), then dp_shard and cp flattened into
                       dp_shard_cp (a second, overlapping mesh)
    --hang-tp          rank 3 skips one all_reduce on its tp group: a hang inside mesh_tp
Each rank then waits in a loop (``spin``) until the test stops it, or hangs.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

p = argparse.ArgumentParser()
p.add_argument("--layout", default="2d")
p.add_argument("--hang-tp", action="store_true")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
if args.layout == "titan":
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "cp"))
    flat = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
else:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
print(f"rank {rank}: mesh ready", flush=True)
if args.hang_tp:
    t = torch.ones(2)
    tp = mesh.get_group("tp")
    dist.all_reduce(t, group=tp)  # every tp group's first all-reduce completes
    if rank != 3:
        dist.all_reduce(t, group=tp)  # TP LINE: rank 3 never comes, rank 2 waits in its tp group
    dist.barrier()  # BARRIER LINE


def spin():
    while True:
        time.sleep(0.05)  # SPIN LINE


spin()
