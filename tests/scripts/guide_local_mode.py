# The first example of Ray's local-mode guide (docs.ray.io, Train user guide "Local mode", single-process
# local mode), reconstructed line for line: three reports of the loss, none with a checkpoint, then the
# guide's last line reads result.metrics['loss']. Kept as a user would copy it: no rtdebug, no RunConfig
# (the test points HOME at a directory of its own for the default ~/ray_results).
# ruff: noqa
# fmt: off
import torch
from torch import nn
import ray
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

def train_func(config):
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])

    for epoch in range(config["epochs"]):
        # Training loop
        loss = model(torch.randn(32, 10)).sum()
        loss.backward()
        optimizer.step()

        # Report metrics
        ray.train.report({"loss": loss.item()})

trainer = TorchTrainer(
    train_loop_per_worker=train_func,
    train_loop_config={"lr": 0.01, "epochs": 3},
    scaling_config=ScalingConfig(num_workers=0),
)
result = trainer.fit()
print(f"Final loss: {result.metrics['loss']}")
