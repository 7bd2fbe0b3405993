# The unit-test example of Ray's local-mode guide (docs.ray.io, Train user guide "Local mode", "Test with
# local mode"), reconstructed line for line: one report of a loss without a checkpoint, then the guide's
# asserts on the Result. The suite runs it as `rtdebug run -m pytest <a copy of it>`; its name keeps the
# suite's own collection away from it.
# ruff: noqa
# fmt: off
import pytest
import ray
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

def test_training_runs():
    def train_func(config):
        # Report minimal training result
        ray.train.report({"loss": 0.5})

    trainer = TorchTrainer(
        train_loop_per_worker=train_func,
        scaling_config=ScalingConfig(num_workers=0),
    )
    result = trainer.fit()

    assert result.error is None
    assert result.metrics["loss"] == 0.5
