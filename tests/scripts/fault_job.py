"""A 2-rank gloo job for the fault campaign: every step is one all_reduce, so a rank that stops at the
breakpoint leaves its peer blocked inside the C++ collective.

    rtdebug torchrun --nproc-per-node 2 tests/scripts/fault_job.py --steps 20 --progress DIR
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sleep", type=float, default=0.02)
    p.add_argument("--progress", default=None, help="directory: each rank writes its step count there")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.zeros(4)
    for step in range(a.steps):
        t += 1
        dist.all_reduce(t)  # BREAKPOINT: fault step
        if a.progress:
            with open(os.path.join(a.progress, f"rank{rank}"), "w") as f:
                f.write(str(step))
        time.sleep(a.sleep)
    dist.destroy_process_group()
    print(f"FAULT-JOB-DONE rank {rank}", flush=True)


if __name__ == "__main__":
    main()
