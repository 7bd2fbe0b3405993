"""Ray Train TorchTrainer in local mode under torchrun: every process is one rank.

    rtdebug torchrun --nproc-per-node 2 examples/ddp_fashion.py
The process group is built from torchrun's variables, as Ray's LocalTorchController
builds it (gloo on CPU), and rtdebug runs the train function with the cluster's
semantics (docs/local-mode.md): the ranks meet in report(), checkpoints persist.
The data is synthetic FashionMNIST-shaped (1x28x28, 10 classes): no downloads,
fed by DataLoader + DistributedSampler (prepare_data_loader); Ray Data `datasets=`
would shard too, under rtdebug (Ray's own local mode refuses it on more than one rank).
"""

import argparse
import os
import tempfile

import ray.train
import ray.train.torch
import torch
from ray.train import Checkpoint, ScalingConfig
from ray.train.torch import TorchTrainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def synthetic_fashion(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.randn(n, 1, 28, 28, generator=g) * 0.3 + labels.view(-1, 1, 1, 1) / 10.0
    return TensorDataset(images, labels)


def train_func(config):
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    print(f"rank {rank}/{world} local_rank {ctx.get_local_rank()} pid {os.getpid()}", flush=True)
    loader = DataLoader(synthetic_fashion(config["samples"]), batch_size=config["batch_size"], shuffle=True)
    loader = ray.train.torch.prepare_data_loader(loader)
    model = ray.train.torch.prepare_model(
        nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 10))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for images, labels in loader:
            loss = loss_fn(model(images), labels)
            opt.zero_grad()
            loss.backward()  # BREAKPOINT: ddp step
            opt.step()
            total, batches = total + loss.item(), batches + 1
        metrics = {"epoch": epoch, "loss": total / max(batches, 1), "rank": rank}
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(d, "model.pt"))
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
        print(f"rank {rank} epoch {epoch} loss {metrics['loss']:.4f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    a = p.parse_args()
    trainer = TorchTrainer(
        train_func,
        train_loop_config=vars(a) | {"batch_size": a.batch_size},
        scaling_config=ScalingConfig(num_workers=0),
    )
    result = trainer.fit()
    print(f"rank {os.environ.get('RANK', 0)} final metrics: {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
