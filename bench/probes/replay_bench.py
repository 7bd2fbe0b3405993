"""Capture and replay (``--capture``, ``rtdebug replay``): what capturing costs a realistic DDP step, how fast a
replayed rank runs, and how big a capsule is.

    bash scripts/bench.sh probes/replay_bench [--rounds 3] [--steps 20] [--out ...]

The step: the bench's small transformer (2 encoder layers, d_model 256, 16 x 64 tokens, as in
``stopon_ab.py``) under gloo DDP, 2 ranks, one core each (rank i pinned to core i), 5 warm-up steps, then
``--steps`` timed ones. Each round, in order:

1. **Capture**: the same job with and without ``--capture`` at the same time (rank i of both on core i, so a
   burst of other load hits both sides); the ratio is steps/s with over without, per rank, median over ranks.
2. **Live**: the job without capture, alone: rank 1's steps/s.
3. **Replay**: ``rtdebug replay CAPSULE --rank 1`` alone, pinned to core 1 as rank 1 was: its steps/s against
   step 2's (no peer is waited for, every all-reduce is read from the capsule).

And from the capsule of step 1: its bytes per step per rank (every file of ``rank-R/``) against the floor (the
bytes the rank's collectives returned: each output's shape x dtype, from the index), and the write rate
(those bytes over the capturing job's timed steps, MB/s). Goals (issue 45): capture >= 0.8x, replay
>= 1.0x, size <= 1.1x the floor.

Result: bench/results/2026-12-07-replay.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.suite.common import PY, ROOT, WORK, base_env, free_range, log

WARMUP = 5
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def loop(steps: int) -> None:
    """A rank (or the replayed rank): time each step, write them to $BENCH_CTL/$BENCH_TAG-rank{R}.json."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(encoder, torch.nn.Linear(256, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for i in range(WARMUP + steps):
        x = torch.randn(16, 64, 256, generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    Path(os.environ["BENCH_CTL"], f"{os.environ['BENCH_TAG']}-rank{rank}.json").write_text(json.dumps(times))
    dist.destroy_process_group()


def _env(ctl: Path, tag: str) -> dict[str, str]:
    """The ranks run this file, which imports bench.suite (and it tests/support): both on the path."""
    env = base_env(ctl / "registry")
    env.update(BENCH_CTL=str(ctl), BENCH_TAG=tag, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    return env


def _job(ctl: Path, tag: str, steps: int, capture: Path | None = None) -> subprocess.Popen:
    env = _env(ctl, tag)
    cap = ["--capture", str(capture)] if capture else []
    cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(free_range(2)), *cap, "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_range(1)),
           __file__, "--steps", str(steps)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait(p: subprocess.Popen, what: str) -> None:
    _, err = p.communicate(timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{what} failed ({p.returncode}): {err.decode(errors='replace')[-2000:]}")


def _rate(ctl: Path, tag: str, rank: int) -> float:
    times = json.loads((ctl / f"{tag}-rank{rank}.json").read_text())
    return len(times) / sum(times)


def _floor(rank_dir: Path) -> int:
    """The bytes the rank's collectives returned: every output the index names, shape x dtype."""
    total = 0
    for line in (rank_dir / "index.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for out in rec.get("out", ()) if rec.get("kind") == "coll" else ():
            total += math.prod(out["shape"]) * DTYPE_BYTES[out["dtype"]]
    return total


def one_round(ctl: Path, steps: int) -> dict[str, Any]:
    cap = ctl / "cap"
    plain, captured = _job(ctl, "plain", steps), _job(ctl, "capture", steps, cap)
    _wait(plain, "the job without --capture")
    _wait(captured, "the job with --capture")
    capture_ratio = statistics.median(_rate(ctl, "capture", r) / _rate(ctl, "plain", r) for r in (0, 1))
    _wait(_job(ctl, "live", steps), "the live job alone")
    env = _env(ctl, "replay")
    r = subprocess.run([PY, "-m", "rtdebug", "replay", str(cap), "--rank", "1", "--port", str(free_range(1))],
                       cwd=ROOT, env=env, capture_output=True, timeout=900)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"the replay failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    sizes = {}
    for rank in (0, 1):
        d = cap / f"rank-{rank}"
        size = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
        timed = sum(json.loads((ctl / f"capture-rank{rank}.json").read_text()))
        sizes[rank] = {"bytes": size, "floor": _floor(d), "write_mb_s": size / 1e6 / timed}
    total_steps = WARMUP + steps
    return {
        "capture_ratio": capture_ratio,
        "capture_steps_s": [_rate(ctl, "capture", r) for r in (0, 1)],
        "plain_steps_s": [_rate(ctl, "plain", r) for r in (0, 1)],
        "live_rank1_steps_s": _rate(ctl, "live", 1),
        "replay_rank1_steps_s": _rate(ctl, "replay", 1),
        "replay_ratio": _rate(ctl, "replay", 1) / _rate(ctl, "live", 1),
        "bytes_per_step": statistics.median(s["bytes"] / total_steps for s in sizes.values()),
        "size_ratio": statistics.median(s["bytes"] / s["floor"] for s in sizes.values()),
        "write_mb_s": statistics.median(s["write_mb_s"] for s in sizes.values()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps per job (after 5 warm-up ones)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(WORK / "replay_bench.json"))
    a = p.parse_args()
    if "BENCH_TAG" in os.environ:  # a rank of a job this probe started (or the replay of one)
        loop(a.steps)
        return 0
    WORK.mkdir(exist_ok=True)
    rounds = []
    for i in range(a.rounds):
        ctl = Path(tempfile.mkdtemp(prefix="replay-bench-", dir=WORK))
        try:
            rounds.append(one_round(ctl, a.steps))
        finally:
            shutil.rmtree(ctl, ignore_errors=True)
        r = rounds[-1]
        log(f"round {i + 1}: capture {r['capture_ratio']:.3f}x, replay {r['replay_ratio']:.3f}x, "
            f"size {r['size_ratio']:.4f}x the floor ({r['bytes_per_step'] / 1e6:.2f} MB/step), "
            f"write {r['write_mb_s']:.1f} MB/s")  # fmt: skip
    keys = ("capture_ratio", "replay_ratio", "size_ratio", "bytes_per_step", "write_mb_s")
    res: dict[str, Any] = {k: {"median": statistics.median(r[k] for r in rounds), "min": min(r[k] for r in rounds),
               "max": max(r[k] for r in rounds)} for k in keys}  # fmt: skip
    res["rounds"] = rounds
    res["load"] = list(os.getloadavg())
    Path(a.out).write_text(json.dumps(res, indent=1))
    log("medians: " + ", ".join(f"{k} {res[k]['median']:.4g}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
