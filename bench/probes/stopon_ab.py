"""``--stop-on``'s cost as an A/B inside one 2-rank job: the same ranks, the condition on and off in turns.

    bash scripts/bench.sh probes/stopon_ab [--pairs 40] [--kinds nonfinite,disagree] [--out ...]

Why in one job: two identical gloo jobs side by side on 2 shared cores differ by several percent from round
to round (bench/results/*-collective-record.md), which drowns a 1-2 % effect. Here one ``rtdebug torchrun --stop-on
KIND`` job holds two identical DDP models: ``A`` made while the condition was armed (its gradient hooks
for ``nonfinite``), ``B`` made while it was off (no hook of ours on it). Blocks
of training steps alternate ABBA: an A block with the condition armed, a B block with it off (``B`` is the
job without ``--stop-on``: the only thing of ours it passes through is one flag test in the backward and
step hooks). Each pair's ratio is time(B)/time(A), i.e. steps/s with over without; median with a 95 %
bootstrap interval. The steps: a small transformer (2 encoder layers, d_model 256, 16 x 64 tokens: a
training step in the usual proportion of compute to parameters, ~0.1 s here), a 512-wide 4-layer MLP on
128 samples (~15 ms) and a 64-wide one on 32 (~2 ms): the last two have so little compute per parameter
that they show the floor of a per-gradient cost.

Result: bench/results/2026-12-06-stop-on.md.
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

SPEC = {"nonfinite": "nonfinite", "disagree": "disagree:100"}
BLOCK = {512: 10, 64: 50, 0: 3}  # steps per block (0: the transformer)


def loop(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from rtdebug.rank.stopon import arm

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    w = a.width

    def net() -> torch.nn.Module:
        torch.manual_seed(0)
        if w == 0:  # a small transformer: 2 encoder layers, d_model 256, on 16 sequences of 64 tokens
            layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
            return torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                       torch.nn.Linear(256, 1))  # fmt: skip
        layers = [m for _ in range(3) for m in (torch.nn.Linear(w, w), torch.nn.ReLU())]
        return torch.nn.Sequential(*layers, torch.nn.Linear(w, 1))

    spec = SPEC[a.kind]
    arm.install(spec)
    with_ = torch.nn.parallel.DistributedDataParallel(net())  # made armed: rtdebug's gradient hooks
    arm.install("")
    without = torch.nn.parallel.DistributedDataParallel(net())  # made off: no hook of ours
    opts = {id(m): torch.optim.SGD(m.parameters(), lr=1e-6) for m in (with_, without)}
    x = torch.randn(16, 64, 256) if w == 0 else torch.randn(128 if w == 512 else 32, w)

    def step(m: torch.nn.Module) -> None:
        opt = opts[id(m)]
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()

    for m in (with_, without):
        for _ in range(20):
            step(m)
    blocks = []
    for b in range(2 * a.pairs):
        on = (b % 4) in (0, 3)  # ABBA
        arm.install(spec if on else "")
        m = with_ if on else without
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(BLOCK[w]):
            step(m)
        blocks.append([on, time.perf_counter() - t0])
    if rank == 0:
        Path(a.ctl, "blocks.json").write_text(json.dumps(blocks))
    dist.destroy_process_group()


def measure(kind: str, width: int, pairs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="stopon-ab-", dir=WORK) as tmp:
        env = base_env(Path(tmp) / "registry")
        cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(free_range(2)), "--stop-on", SPEC[kind],
               "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_range(1)),
               __file__, "--kind", kind, "--width", str(width), "--ctl", tmp, "--pairs", str(pairs)]  # fmt: skip
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=900)
        blocks = json.loads(Path(tmp, "blocks.json").read_text())
    ratios = []
    for i in range(0, len(blocks), 2):
        (on_a, t_a), (_, t_b) = blocks[i], blocks[i + 1]
        t_on, t_off = (t_a, t_b) if on_a else (t_b, t_a)
        ratios.append(t_off / t_on)
    on = [BLOCK[width] / t for o, t in blocks if o]
    off = [BLOCK[width] / t for o, t in blocks if not o]
    return {"ratio": statistics.median(ratios), "ci": median_ci(ratios), "n": len(ratios),
            "on_steps_s": statistics.median(on), "off_steps_s": statistics.median(off)}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=tuple(SPEC), help="(the ranks' condition)")
    p.add_argument("--width", type=int, default=512, help="(the ranks' model width)")
    p.add_argument("--ctl", help="(the ranks' output directory)")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--kinds", default=",".join(SPEC))
    p.add_argument("--widths", default="0,512,64", help="0: the transformer; N: an N-wide MLP")
    p.add_argument("--out", default=str(WORK / "stopon_ab.json"))
    a = p.parse_args()
    if a.kind and a.ctl:
        loop(a)
        return 0
    WORK.mkdir(exist_ok=True)
    res = {}
    for kind in a.kinds.split(","):
        for width in map(int, a.widths.split(",")):
            r = res[f"{kind}-{width}"] = measure(kind, width, a.pairs)
            rates = f"{r['on_steps_s']:.1f} vs {r['off_steps_s']:.1f} steps/s"
            log(f"{kind} (width {width}): on/off {r['ratio']:.4f} CI {r['ci']} (n={r['n']}), {rates}")
    res["load"] = list(os.getloadavg())
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
