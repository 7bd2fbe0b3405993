"""Shared by every bench section: paths, logging, stats, free ports (``support.ports``), a job's environment."""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from support.ports import PortRanges

SUITE = Path(__file__).resolve().parent
BENCH = SUITE.parent
ROOT = BENCH.parent
WORK = BENCH / ".work"
LOOP = SUITE / "loop.py"
RECIPE = SUITE / "recipe_listen.py"
PY = sys.executable

HOST = "127.0.0.1"
READY = "local ranks ready (session"
METRICS = ("wall", "best", "cpu")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- stats -----------------------------------------------------------------------
def summary(xs: list[float]) -> dict[str, Any]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def median_ci(xs: list[float], reps: int = 4000, seed: int = 0) -> list[float] | None:
    """95 % percentile-bootstrap interval of the median: how far the median itself may be off.

    A launch on 2 shared cores varies by +-20 % from one run to the next, so a 3 % goal is only
    shown when this interval, not one lucky median, sits under it.
    """
    xs = [x for x in xs if x is not None]
    if len(xs) < 5:
        return None
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return [meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]]


def fmt(s: dict[str, Any], digits: int = 2, unit: str = "") -> str:
    if not s or s.get("n", 0) == 0:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}{unit} (n=1)"
    return f"{s['median']:.{digits}f}{unit} [{s['min']:.{digits}f}–{s['max']:.{digits}f}] (n={s['n']})"


# -- ports -----------------------------------------------------------------------
_ports = PortRanges(41000, 59000, gap=7, host=HOST)  # away from 5678 and torchrun's 29500


def free_range(n: int) -> int:
    """A base with n free ports, in 41000-59000, none handed out before in this run."""
    return _ports.take(n)


def base_env(registry: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("RTDEBUG_", "DEBUGPY", "PYDEVD")):
            env.pop(k)
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    if registry is not None:
        env["RTDEBUG_REGISTRY_DIR"] = str(registry)
    return env


def touch(path: Path) -> None:
    path.write_text("")
