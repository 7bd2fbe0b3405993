"""Single-process Ray Train local mode: ScalingConfig(num_workers=0) runs train_func here.

    rtdebug run examples/local_linear.py        # then attach to 127.0.0.1:5678

Under rtdebug, local mode keeps the cluster's semantics: each report() with a checkpoint is copied under
--storage (default ~/ray_results)/<name>/, result.checkpoint exists after fit(), and running it again with
the same --name resumes from the last checkpoint (get_checkpoint()), as a Ray cluster does.
"""

import argparse
import os
import tempfile

import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    first = 0
    resume = ray.train.get_checkpoint()
    if resume is not None:  # a second run with the same --name goes on from the last checkpoint
        state = torch.load(os.path.join(resume.path, "model.pt"))
        model.load_state_dict(state["model"])
        first = state["epoch"] + 1
    for epoch in range(first, first + config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # BREAKPOINT: local step
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(d, "model.pt"))
            ray.train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(d))
    return "done"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--storage", default=None, help="RunConfig(storage_path) (default ~/ray_results)")
    p.add_argument("--name", default=None, help="RunConfig(name): the same name again resumes")
    a = p.parse_args()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": a.epochs, "lr": a.lr},
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(storage_path=a.storage, name=a.name, checkpoint_config=CheckpointConfig(num_to_keep=2)),
    )
    result = trainer.fit()
    print(f"final metrics: {result.metrics}", flush=True)
    print(f"final checkpoint: {result.checkpoint.path if result.checkpoint else None}", flush=True)


if __name__ == "__main__":
    main()
