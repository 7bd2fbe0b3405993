"""A script that turns Ray Train V2 off before importing it: local mode cannot work."""

import os

os.environ["RAY_TRAIN_V2_ENABLED"] = "0"

from ray.train.torch import TorchTrainer  # noqa: E402

print("unreachable", TorchTrainer)
