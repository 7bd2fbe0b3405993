"""What the background debugpy import (``rtdebug.rank.endpoint.warmup``) costs a lazy rank's main thread, once.

    bash scripts/bench.sh probes/warmup_probe [--rounds 5] [--busy torch|py]

One process per round, pinned to one core: a lazy endpoint with ``warm_after=W``, and a main thread
that steps (``torch``: a small MLP forward/backward; ``py``: pure Python, the worst case for the GIL)
and counts steps per 0.25 s window. Reported: the rate in the windows that overlap the import against
the median window, the steps lost to it (in seconds of the median pace), and what that is over the
60 s a rank waits by default before importing (the least time over which the one-off is spread).

Result: bench/results/2026-12-04-attach-all.md (and docs/performance.md's warm-up row).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

WINDOW_S = 0.25


def rank(busy: str, warm: float, total: float) -> None:
    os.sched_setaffinity(0, {0})
    from rtdebug.rank.endpoint import Endpoint

    step = _step(busy)
    Endpoint("127.0.0.1", 0).start(warm_after=warm)  # any free port: nobody attaches
    marks: list[tuple[float, int]] = []
    t0 = now = time.perf_counter()
    n, began, ended = 0, None, None
    while now - t0 < total:
        step()
        n += 1
        now = time.perf_counter()
        if began is None and "debugpy" in sys.modules:
            began = now - t0
        if began is not None and ended is None and not any(t.name == "rtdebug-warmup" for t in threading.enumerate()):
            ended = now - t0  # the warm-up thread has finished the import
        if not marks or now - marks[-1][0] >= WINDOW_S:
            marks.append((now, n))
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:], strict=False)]
    starts = [m[0] - t0 for m in marks[:-1]]
    print(json.dumps({"rates": rates, "starts": starts, "began": began, "ended": ended}))


def _step(busy: str):
    if busy == "py":
        return lambda: sum(i * i for i in range(2000))
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x = torch.randn(32, 64)

    def step() -> None:
        model.zero_grad()
        model(x).sum().backward()

    return step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--busy", choices=("torch", "py"), default="torch")
    p.add_argument("--warm", type=float, default=3.0)
    p.add_argument("--total", type=float, default=12.0)
    p.add_argument("--rank", action="store_true", help="(the probed process)")
    a = p.parse_args()
    if a.rank:
        rank(a.busy, a.warm, a.total)
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RTDEBUG_", "DEBUGPY", "PYDEVD"))}
    lost, dips, took = [], [], []
    for _ in range(a.rounds):
        cmd = [sys.executable, __file__, "--rank", "--busy", a.busy, "--warm", str(a.warm), "--total", str(a.total)]
        out = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        med = statistics.median(out["rates"])
        b, e = out["began"], out["ended"]
        hit = [r for s, r in zip(out["starts"], out["rates"], strict=True) if s + WINDOW_S > b and s < e + WINDOW_S]
        lost.append(sum(med - r for r in hit) * WINDOW_S / med)
        dips.append(min(hit) / med if hit else 1.0)
        took.append(e - b)
    print(f"busy={a.busy}, {a.rounds} rounds, one core, load {os.getloadavg()[0]:.1f}")
    print(f"import took (wall) s: {statistics.median(took):.2f} [{min(took):.2f}-{max(took):.2f}]")
    print(f"slowest window during it / median window: {statistics.median(dips):.3f} [{min(dips):.3f}-{max(dips):.3f}]")
    print(f"main-thread time lost, s: {statistics.median(lost):.3f} [{min(lost):.3f}-{max(lost):.3f}]")
    print(f"as a step rate over the default 60 s before it: {1 - statistics.median(lost) / 60:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
