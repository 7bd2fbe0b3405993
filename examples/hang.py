"""The classic distributed hang: one rank skips a collective and waits somewhere else.

Every rank trains a few agreeing steps, then rank ``--skip-rank`` (default 1)
skips one ``all_reduce`` and goes to ``evaluate``'s ``barrier``, while the
others wait in that ``all_reduce`` -- until the process-group timeout.

    rtdebug torchrun --nproc-per-node 3 examples/hang.py
    rtdebug stacks          # in another terminal:
    # rank 1 never entered ALLREDUCE #4 (hang.py:22): it is in barrier <- evaluate (hang.py:26), ...
    # rank 1: barrier <- evaluate (hang.py:26)   <- departs from ranks 0,2 at main (hang.py:42); ...

``--check-collectives`` names the mismatch at once instead of hanging.
"""

import argparse

import torch
import torch.distributed as dist


def train_step(t: torch.Tensor) -> None:
    dist.all_reduce(t)  # BREAKPOINT: hang all_reduce


def evaluate() -> None:
    dist.barrier()  # BREAKPOINT: hang barrier


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3, help="agreeing steps before the hang")
    p.add_argument("--skip-rank", type=int, default=1)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(4)
    for _ in range(args.steps):
        train_step(t)
    print(f"rank {rank}: {args.steps} steps done", flush=True)
    if rank != args.skip_rank:
        train_step(t)  # BREAKPOINT: hang skipped step
    evaluate()  # BREAKPOINT: hang evaluate
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
