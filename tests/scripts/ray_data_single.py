"""Ray Data in single-process local mode: the dataset shard reaches the train function."""

import os
import tempfile

import ray.data
import ray.train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func():
    shard = ray.train.get_dataset_shard("train")
    total = sum(row["x"] for row in shard.iter_rows())
    with tempfile.TemporaryDirectory() as d:  # Result.metrics are the last checkpoint's, as on a cluster
        ray.train.report({"total": total}, checkpoint=Checkpoint.from_directory(d))


ds = ray.data.from_items([{"x": i} for i in range(10)])
result = TorchTrainer(
    train_func,
    datasets={"train": ds},
    scaling_config=ScalingConfig(num_workers=0),
    run_config=RunConfig(storage_path=os.environ.get("RTDEBUG_TEST_STORAGE")),
).fit()
print("ray data total", result.metrics["total"], flush=True)
