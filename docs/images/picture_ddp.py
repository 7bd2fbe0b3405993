"""Two ranks train one DDP model: rank 1 stops at a breakpoint while rank 0 waits for it in DDP's all-reduce."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(20):
        x = torch.randn(64, 16) + rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 1 and step == 3:
            grad_norm = model.module[0].weight.grad.norm().item()  # rank 1 stops here
            print(f"rank {rank} step {step}: loss {loss.item():.4f}, grad norm {grad_norm:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
