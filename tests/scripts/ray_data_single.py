"""Ray Data in single-process local mode: the dataset shard reaches the train function."""

import ray.data
import ray.train
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer


def train_func():
    shard = ray.train.get_dataset_shard("train")
    total = sum(row["x"] for row in shard.iter_rows())
    ray.train.report({"total": total})


ds = ray.data.from_items([{"x": i} for i in range(10)])
result = TorchTrainer(train_func, datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=0)).fit()
print("ray data total", result.metrics["total"], flush=True)
