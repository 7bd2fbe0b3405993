"""Plain PyTorch DDP, no Ray at all: the harness must not need Ray.

rtdebug torchrun --nproc-per-node 2 examples/plain_ddp.py
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=256)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(a.samples, 8)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()  # BREAKPOINT: plain step
            opt.step()
        print(f"rank {rank} epoch {epoch} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
