"""The collective record's cost as an A/B inside one job: the same ranks, record on and off in turns.

    bash scripts/bench.sh probes/collrec_ab [--pairs 40] [--out bench/.work/collrec_ab.json]

Why a second design: ``collrec_bench.py`` runs an on-job and an off-job side by side, and on 2 shared
cores two identical gloo jobs differ by several percent from round to round (its per-round rates spread
200-630 steps/s), so a 1 % effect drowns. Here one 2-rank ``rtdebug torchrun`` job (record armed) swaps
``torch.distributed.all_reduce`` between the record's wrapper and torch's own function (``__wrapped__``)
every block of steps, in ABBA order so drift cancels; both ranks swap at the same step. Rank 0 times each
block; each pair's ratio is time(off) / time(on), i.e. steps/s on over off. Median with a 95 % bootstrap
interval. Loops: ``allreduce`` (nothing but one 1 KiB all_reduce per step: the worst case), ``step`` (a
small MLP's forward/backward, its 4 gradients all_reduced by hand, and the flag; both as in
collrec_bench.py), ``ddp`` (a training step as jobs write it: DDP all-reduces the gradients from C++,
the script all_reduces its loss for logging; ~1 ms here) and ``train`` (the same with a 512-wide,
4-layer MLP: a ~10 ms step, still far smaller than a real job's).

Result: bench/results/2026-12-04-collective-record.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.suite.common import PY, ROOT, WORK, base_env, free_range, log, median_ci

BLOCK = {"allreduce": 200, "step": 50, "ddp": 50, "train": 10}  # steps per block: ~0.1-0.6 s each here
WIDTH = {"train": 512}  # the model's width (64 elsewhere): "train" is a step of ~10 ms, "ddp" of ~1 ms


def loop(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    wrapped = dist.all_reduce
    if not getattr(wrapped, "__rtdebug_collrec__", False):
        raise SystemExit("the collective record is not armed in this rank (RTDEBUG_COLLECTIVES=0?)")
    plain = wrapped.__wrapped__
    if a.against == "bare":  # the control: what any Python-level wrapper costs, doing nothing

        def wrapped(*args, **kwargs):  # type: ignore[no-redef]
            return plain(*args, **kwargs)

    w = WIDTH.get(a.loop, 64)
    layers = [m for _ in range(3 if a.loop == "train" else 1) for m in (torch.nn.Linear(w, w), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(w, 1))
    x, flag = torch.randn(128 if a.loop == "train" else 32, w), torch.zeros(256)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    def step() -> None:
        if a.loop in ("ddp", "train"):  # a training step: DDP all-reduces the gradients from C++; the script, its loss
            opt.zero_grad()
            loss = ddp(x).pow(2).mean()
            loss.backward()
            opt.step()
            dist.all_reduce(loss.detach())  # what a script logs: the mean loss over ranks
            return
        if a.loop == "step":
            model.zero_grad()
            model(x).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
        dist.all_reduce(flag)

    for _ in range(200):
        step()
    blocks = []
    for b in range(2 * a.pairs):
        on = (b % 4) in (0, 3)  # ABBA: on, off, off, on, ...
        dist.all_reduce = c10d.all_reduce = wrapped if on else plain
        t0 = time.perf_counter()
        for _ in range(BLOCK[a.loop]):
            step()
        blocks.append([on, time.perf_counter() - t0])
    dist.all_reduce = c10d.all_reduce = wrapped
    if rank == 0:
        Path(a.ctl, "blocks.json").write_text(json.dumps(blocks))
    dist.destroy_process_group()


def measure(kind: str, pairs: int, against: str = "record") -> dict:
    with tempfile.TemporaryDirectory(prefix="collrec-ab-", dir=WORK) as tmp:
        env = base_env(Path(tmp) / "registry")
        cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(free_range(2)), "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_range(1)), __file__, "--loop", kind,
               "--ctl", tmp, "--pairs", str(pairs), "--against", against]  # fmt: skip
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
        blocks = json.loads(Path(tmp, "blocks.json").read_text())
    ratios = []
    for i in range(0, len(blocks), 2):
        (on_a, t_a), (_, t_b) = blocks[i], blocks[i + 1]
        t_on, t_off = (t_a, t_b) if on_a else (t_b, t_a)
        ratios.append(t_off / t_on)
    on = [BLOCK[kind] / t for o, t in blocks if o]
    off = [BLOCK[kind] / t for o, t in blocks if not o]
    return {"ratio": statistics.median(ratios), "ci": median_ci(ratios), "n": len(ratios),
            "on_steps_s": statistics.median(on), "off_steps_s": statistics.median(off), "ratios": ratios}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", choices=tuple(BLOCK), help="(the ranks' loop)")
    p.add_argument("--ctl", help="(the ranks' output directory)")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--kinds", default=",".join(BLOCK), help="loops to measure, comma-separated (default: all)")
    p.add_argument("--against", choices=("record", "bare"), default="record", help="bare: a do-nothing wrapper")
    p.add_argument("--out", default=str(WORK / "collrec_ab.json"))
    a = p.parse_args()
    if a.loop:
        loop(a)
        return 0
    WORK.mkdir(exist_ok=True)
    res = {}
    for kind in a.kinds.split(","):
        res[kind] = measure(kind, a.pairs, a.against)
        r = res[kind]
        rates = f"{r['on_steps_s']:.0f} vs {r['off_steps_s']:.0f} steps/s"
        log(f"{kind}: on/off {r['ratio']:.4f} CI {r['ci']} (n={r['n']}), {rates}")
    res["load"] = os.getloadavg()[0]
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
