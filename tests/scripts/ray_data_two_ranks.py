"""datasets= with two ranks: Ray local mode rejects it; the harness explains what to do."""

import ray.data
import ray.train
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

ds = ray.data.from_items([{"x": i} for i in range(8)])
TorchTrainer(lambda: None, datasets={"train": ds}, scaling_config=ScalingConfig(num_workers=0)).fit()
