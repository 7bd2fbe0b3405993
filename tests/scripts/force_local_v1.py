"""A Ray Train V1 trainer (the V1 module imported directly): --force-local must refuse it in one line."""

from ray.train import ScalingConfig
from ray.train.torch.torch_trainer import TorchTrainer


def train_fn():
    pass


TorchTrainer(train_fn, scaling_config=ScalingConfig(num_workers=2)).fit()
