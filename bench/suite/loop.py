"""The bundled training loop that bench/suite/run.py times.

Modes:
  ddp    small MLP, CPU, gloo DistributedDataParallel (all ranks in lockstep)
  local  the same MLP per rank with no process group (ranks independent)
  py     a torch-free, Python-heavy step (for interpreters without torch)

Protocol with the bench, through files in ``--ctl DIR`` (all optional):
  first-<rank>            time.time() right after the first step finished
  warm-<rank>             written once the warmup steps are done
  go-<phase>              the bench creates it; the phase starts at the next check
  res-<phase>-<rank>.json steps/s of each measurement window of that phase, by the wall
                          clock and per CPU-second of this process (all its threads)
  stop                    with --hold: the bench creates it to end the run

In ddp mode the ranks agree (a tiny all-reduce every CHECK_EVERY steps) on the
step at which a phase starts and stops, so no rank is left waiting in a
collective for a peer that already left. Every mode does the same checks, so
the bookkeeping costs the same in every configuration measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CHECK_EVERY = 20


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("ddp", "local", "py"), default="ddp")
    p.add_argument("--ctl", help="control/result directory (see module doc)")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--window", type=float, default=1.0, help="seconds per measurement window (approx.)")
    p.add_argument("--windows", type=int, default=3, help="windows per phase")
    p.add_argument("--phases", default="main", help="comma-separated phase names, run in order")
    p.add_argument("--exit-after-first", action="store_true", help="stop after the first step (launch timing)")
    p.add_argument("--hold", action="store_true", help="after the phases keep stepping until ctl/stop exists")
    p.add_argument(
        "--pin", type=int, metavar="K", help="pin this rank to CPU number (LOCAL_RANK + K) mod ncpu of the allowed ones"
    )
    return p.parse_args()


# -- the step functions ------------------------------------------------------
def make_torch_step(ddp: bool):
    import torch
    from torch import nn

    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    if ddp:
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 32)
    y = x.sum(dim=1, keepdim=True)
    stats = {"loss": 0.0, "n": 0}

    def step() -> None:
        loss = nn.functional.mse_loss(model(x), y)  # BENCH-BREAKPOINT
        opt.zero_grad()
        loss.backward()
        opt.step()
        stats["n"] += 1
        if stats["n"] % 10 == 0:
            stats["loss"] = float(loss.detach())

    return step


def make_py_step():
    w = [[((i * 7 + j * 3) % 11 - 5) / 10.0 for j in range(16)] for i in range(16)]
    x = [float(i) / 16 for i in range(16)]

    def dot(a, b):
        s = 0.0
        for u, v in zip(a, b, strict=False):
            s += u * v
        return s

    def relu(v):
        return v if v > 0 else 0.0

    def step() -> None:
        h = [relu(dot(row, x)) for row in w]  # BENCH-BREAKPOINT
        out = dot(h, x)
        g = 0.001 * (out - 1.0)
        for row in w:
            for j in range(len(row)):
                row[j] -= g * x[j]

    return step


# -- coordination --------------------------------------------------------------
class Sync:
    """Agree across ranks on a boolean (any rank saw it) and on a float (rank 0's)."""

    def __init__(self, ddp: bool) -> None:
        self.ddp = ddp
        if ddp:
            import torch
            import torch.distributed as dist

            self.torch, self.dist = torch, dist

    def any(self, flag: bool) -> bool:
        if not self.ddp:
            return flag
        t = self.torch.tensor([1.0 if flag else 0.0])
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def from_rank0(self, value: float) -> float:
        if not self.ddp:
            return value
        t = self.torch.tensor([value])
        self.dist.broadcast(t, 0)
        return float(t.item())


def touch(path: str, text: str = "") -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main() -> int:
    a = parse()
    rank = int(os.environ.get("RANK", "0"))
    if a.pin is not None and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[(int(os.environ.get("LOCAL_RANK", "0")) + a.pin) % len(cpus)]})
    ddp = a.mode == "ddp"
    step = make_py_step() if a.mode == "py" else make_torch_step(ddp)
    sync = Sync(ddp)
    ctl = a.ctl

    def exists(name: str) -> bool:
        return ctl is not None and os.path.exists(os.path.join(ctl, name))

    step()
    if ctl:
        touch(os.path.join(ctl, f"first-{rank}"), repr(time.time()))
    print(f"rtdebug-bench: rank {rank} first step", flush=True)
    if a.exit_after_first:
        if ddp:
            sync.dist.destroy_process_group()
        return 0

    t0 = time.perf_counter()
    for _ in range(a.warmup_steps):
        step()
    rate = a.warmup_steps / max(time.perf_counter() - t0, 1e-9)
    per_window = max(CHECK_EVERY, int(sync.from_rank0(rate) * a.window) // CHECK_EVERY * CHECK_EVERY)
    if ctl:
        touch(os.path.join(ctl, f"warm-{rank}"), repr(rate))

    for phase in a.phases.split(","):
        n = 0
        while not (n % CHECK_EVERY == 0 and sync.any(ctl is None or exists(f"go-{phase}"))):
            step()
            n += 1
        # re-calibrate the window (an attached debugger can slow the step several times over):
        # time a tenth of the previous window, then agree on rank 0's figure
        cal = max(CHECK_EVERY, per_window // 10 // CHECK_EVERY * CHECK_EVERY)
        t0 = time.perf_counter()
        for i in range(cal):
            step()
            if i % CHECK_EVERY == 0:
                sync.any(False)
        rate = cal / max(time.perf_counter() - t0, 1e-9)
        per_window = max(CHECK_EVERY, int(sync.from_rank0(rate) * a.window) // CHECK_EVERY * CHECK_EVERY)
        rates, cpu_rates = [], []
        for _ in range(a.windows):
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(per_window):
                step()
                if i % CHECK_EVERY == 0:
                    sync.any(False)  # the same check cost as while waiting
            t1, c1 = time.perf_counter(), time.process_time()
            rates.append(per_window / (t1 - t0))
            cpu_rates.append(per_window / max(c1 - c0, 1e-9))
        out = {
            "phase": phase,
            "rank": rank,
            "steps_per_window": per_window,
            "rates": rates,
            "cpu_rates": cpu_rates,
            "python": sys.version.split()[0],
        }
        if ctl:
            touch(os.path.join(ctl, f"res-{phase}-{rank}.json"), json.dumps(out))
        else:
            print(json.dumps(out), flush=True)

    if a.hold:
        n = 0
        while True:
            if n % CHECK_EVERY == 0 and sync.any(exists("stop")):
                break
            step()
            n += 1
    if ddp:
        sync.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
