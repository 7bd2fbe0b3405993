"""datasets= with two ranks through TorchTrainer(num_workers=0): each rank's get_dataset_shard("train").

Under rtdebug's default local mode (--ray-local-mode=cluster) every rank gets its share of
ray.data.range(40) and writes what it read to $RAYDATA_OUT/rank<k>.json (two epochs of iter_batches,
iter_torch_batches, materialize); under --ray-local-mode=ray, Ray's own local mode refuses datasets= on
more than one rank (the harness explains it in one line)."""

import json
import os

import psutil
import ray.data
import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func():
    ctx = ray.train.get_context()
    shard = ray.train.get_dataset_shard("train")
    seen = {"rank": ctx.get_world_rank(), "type": type(shard).__name__, "epochs": []}
    for _ in range(2):
        seen["epochs"].append([int(i) for b in shard.iter_batches(batch_size=4) for i in b["id"]])
    seen["torch"] = [int(i) for b in shard.iter_torch_batches(batch_size=5) for i in b["id"].tolist()]
    seen["materialize"] = sorted(int(r["id"]) for r in shard.materialize().take_all())
    seen["ray_pids"] = [p.pid for p in psutil.Process().children(recursive=True)]
    out = os.environ.get("RAYDATA_OUT")
    if out:
        with open(os.path.join(out, f"rank{seen['rank']}.json"), "w") as f:
            json.dump(seen, f)
    ray.train.report({"rows": len(seen["epochs"][0])})


out = os.environ.get("RAYDATA_OUT")
run_config = RunConfig(storage_path=os.path.join(out, "results"), name="raydata") if out else None
ds = ray.data.range(40)
trainer = TorchTrainer(
    train_func, datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=0), run_config=run_config
)
result = trainer.fit()
print(f"ray data done {result.error}", flush=True)  # one write: two ranks share the output
