"""A torchrun rank: ray.data.range(40) split by rtdebug.rank.localmode.data across the job's ranks.

Writes what this rank saw to $RAYDATA_OUT/rank<k>.json: its ids per epoch (iter_batches), the ids from
iter_torch_batches and from materialize, the unsplit "eval" dataset's ids, its pid and the Ray
processes' pids (for the test's leak check)."""

import json
import os
import sys

import psutil
import ray
import ray.data
import torch.distributed as dist
from ray.train import DataConfig
from raydata_exchange import TorchExchange

from rtdebug.common.errors import HarnessError
from rtdebug.rank.localmode import data

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ex = TorchExchange()
mode = os.environ.get("RAYDATA_MODE", "script")  # script: ray.data at top level auto-starts Ray in each rank
if mode == "script":
    datasets = {"train": ray.data.range(40), "eval": ray.data.range(6)}
else:  # callables, nothing started by the script: rank 0 starts the head
    datasets = {"train": lambda: ray.data.range(40), "eval": lambda: ray.data.range(6)}
own = [p.pid for p in psutil.Process().children(recursive=True)]  # the Ray instance the script started
config = DataConfig(datasets_to_split=["train"])
if os.environ.get("RAYDATA_BAD_CONFIG"):

    class OneShard(DataConfig):  # a user's DataConfig that gets the world size wrong
        def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
            return super().configure(datasets, 1, worker_handles, worker_node_ids[:1], **kwargs)

    config = OneShard()
try:
    shards = data.shard_datasets(datasets, config, world, rank, ex)
except HarnessError as e:
    out = os.environ["RAYDATA_OUT"]
    kids = [p.pid for p in psutil.Process().children(recursive=True)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "error": str(e), "own_pids": own, "ray_pids": kids}, f)
    dist.destroy_process_group()
    sys.exit(f"rank {rank}: {e}")
train = shards["train"]
seen = {"rank": rank, "pid": os.getpid(), "own_pids": own, "epochs": [], "type": type(train).__name__}
for _ in range(2):
    seen["epochs"].append([int(i) for b in train.iter_batches(batch_size=4) for i in b["id"]])
seen["torch"] = [int(i) for b in train.iter_torch_batches(batch_size=5) for i in b["id"].tolist()]
seen["torch_type"] = type(next(iter(train.iter_torch_batches(batch_size=5)))["id"]).__name__
seen["materialize"] = sorted(int(r["id"]) for r in train.materialize().take_all())
seen["eval"] = sorted(int(i) for b in shards["eval"].iter_batches() for i in b["id"])
node = ray._private.worker.global_worker.node
seen["ray_pids"] = sorted(
    p.pid for p in psutil.Process().children(recursive=True)
)  # the head's processes are rank 0's descendants (a joined rank starts none)
seen["session_dir"] = node.get_session_dir_path()
out = os.environ["RAYDATA_OUT"]
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(seen, f)
if os.environ.get("RAYDATA_KILL_RANK") == str(rank):
    ex.barrier()  # both wrote their files
    os.kill(os.getpid(), 9)
data.close()
dist.destroy_process_group()
print(f"rank {rank} done", file=sys.stderr)
