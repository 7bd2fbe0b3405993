"""Single-process Ray Train local mode: ScalingConfig(num_workers=0) runs train_func here.

    rtdebug run examples/local_linear.py        # then attach to 127.0.0.1:5678
Local mode limits you will meet: result.path is None, report() keeps only the
last metrics/checkpoint in memory, get_storage() raises.
"""

import argparse

import ray.train
import torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # BREAKPOINT: local step
        ray.train.report({"epoch": epoch, "loss": loss.item()})
    return "done"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args()
    trainer = TorchTrainer(
        train_func, train_loop_config={"epochs": a.epochs, "lr": a.lr}, scaling_config=ScalingConfig(num_workers=0)
    )
    result = trainer.fit()
    print(f"final metrics: {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
