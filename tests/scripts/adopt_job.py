"""A plain gloo DDP loop for `rtdebug adopt`: all_reduce steps until the control file appears.

Started WITHOUT rtdebug (`python -m torch.distributed.run --nproc-per-node 2 adopt_job.py CONTROL`).
ADOPT_HANG=1: rank 1 skips one all_reduce and sleeps until CONTROL appears, so rank 0 blocks in the
C++ collective (the hung variant). ADOPT_PG_TIMEOUT=S: init_process_group(timeout=S seconds).
ADOPT_NODUMP=1: the ranks make themselves non-dumpable (only CAP_SYS_PTRACE may trace them then).
CONTROL.crash appearing makes rank 1 of the first attempt exit 3 (torchrun --max-restarts restarts the ranks).
"""

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def step(t: torch.Tensor, stop: bool) -> bool:
    """One all_reduce; its last element carries "stop" so that every rank leaves the loop at the same step."""
    t[-1] = float(stop)
    dist.all_reduce(t)
    return bool(t[-1].item() > 0)


def wait_quietly(control: Path) -> None:
    while not control.exists():
        time.sleep(0.05)


def main() -> None:
    control = Path(sys.argv[1])
    if os.environ.get("ADOPT_NODUMP") == "1":
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    timeout = os.environ.get("ADOPT_PG_TIMEOUT")
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(timeout)) if timeout else None)
    hang = os.environ.get("ADOPT_HANG") == "1"
    print(f"job rank {dist.get_rank()} pid {os.getpid()} running", flush=True)
    n = 0
    while True:
        rank = dist.get_rank()
        n += 1  # BREAKPOINT: step
        if hang and rank == 1 and n == 5:
            wait_quietly(control)  # skips the collective: rank 0 waits in all_reduce
            break
        if rank == 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0" and control.with_suffix(".crash").exists():
            sys.exit(3)
        if step(torch.ones(5) * rank, control.exists()):
            break
        time.sleep(0.02)
    wrapped = getattr(dist.all_reduce, "__rtdebug_collrec__", False)  # rtdebug's collective record left behind?
    print(f"job rank {dist.get_rank()} done after {n} steps (collectives wrapped: {wrapped})", flush=True)
    if not hang:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
