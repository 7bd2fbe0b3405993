"""rtdebug benchmark: the harness against plain torchrun, side by side in one run.

    bash scripts/bench.sh            # full run (~10 min on 2 cores)
    bash scripts/bench.sh --quick    # smoke run (~3 min, 1-2 repeats: spreads are thin)
    bash scripts/bench.sh --dry      # no job: the options, the sections' code, the report (CI's smoke test)

Prints a table of ratios and writes bench/results/DATE-run.md (machine, versions, raw
medians and spreads). Every configuration is launched as a real process tree
(torchrun, or the harness launching torchrun) in its own session and killed by
session id afterwards. Configurations are interleaved round by round and each
ratio is taken within its round (config / plain of the same round), so slow
drift on a shared machine hits both sides of a ratio alike.

Sections:
  1  steady-state steps/s, torchrun N=2: plain, harness lazy, lazy + attached
     (no breakpoints), after detach, --eager, per-rank debugpy.listen recipe
  2  launch -> all ranks attachable (harness ready line) vs plain launch -> first step
  3  attach-all latency: 4 ranks, a DAP client per rank in parallel, one breakpoint
  4  16 local ranks: register + attachable, registry cost per rank
  5  Python 3.11 vs 3.12 and 3.13 (sys.monitoring) for attached-no-breakpoint

The sections live in the bench.suite package (bench/suite/__init__.py lists the modules); this file
only parses the options, runs the sections and writes the report.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.suite.attach import attach_latency
from bench.suite.common import BENCH, ROOT, WORK
from bench.suite.jobs import kill_all
from bench.suite.launch import launch_times
from bench.suite.many import many_ranks
from bench.suite.pythons import py_versions
from bench.suite.report import report
from bench.suite.steady import steady_state
from bench.suite.summary import machine, print_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few repeats, short windows (~3 min)")
    ap.add_argument("--only", default="1,2,3,4,5", help="sections to run, e.g. 1,3")
    ap.add_argument("--rounds", type=int, help="override the repeat count of every section")
    ap.add_argument(
        "--modes",
        default="local",
        help="loop modes for section 1 (local, ddp, py; comma-separated); the first is also section 2's loop",
    )
    ap.add_argument("--launch-ns", type=_counts, help="rank counts for section 2, e.g. 2 (default 2,4,8; --quick: 2,4)")
    ap.add_argument("--out", help="the report (default bench/results/DATE-run.md; --dry: bench/.work/dry-run.md)")
    ap.add_argument("--from-json", metavar="PATH", help="only re-render the report from a saved results.json")
    ap.add_argument("--dry", action="store_true", help="start no job: the options, the sections' code and the report")
    a = ap.parse_args()
    a.out = a.out or str(WORK / "dry-run.md" if a.dry else BENCH / "results" / time.strftime("%Y-%m-%d-run.md"))
    if a.dry:
        return dry(a)
    if a.from_json:
        saved: dict[str, Any] = json.loads(Path(a.from_json).read_text())
        Path(a.out).write_text(report(saved, saved.get("quick", False)))
        print_table(saved)
        return 0
    only = {s.strip() for s in a.only.split(",")}
    WORK.mkdir(parents=True, exist_ok=True)
    # Bytecode for the harness, as `pip install` leaves it: an editable checkout under
    # PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every harness module in every rank.
    compileall.compile_dir(str(ROOT / "harness"), quiet=1)
    q = a.quick
    R = lambda full, quick: a.rounds or (quick if q else full)  # noqa: E731
    res: dict[str, Any] = {"machine": machine()}
    load0 = os.getloadavg()[0]
    t0 = time.time()
    try:
        if "1" in only:
            for mode in a.modes.split(","):
                steady_state(res, R(3, 1), mode, window=0.5, windows=5, warmup=150)
        if "2" in only:
            ns = a.launch_ns or ([2, 4] if q else [2, 4, 8])
            launch_times(res, R(3, 1), ns, a.modes.split(",")[0])
        if "3" in only:
            attach_latency(res, R(3, 1))
        if "4" in only:
            many_ranks(res, R(2, 1))
        if "5" in only:
            py_versions(res, R(4, 1), window=0.4, windows=5)
    finally:
        kill_all()
    res["wall_s"] = time.time() - t0
    res["quick"] = q
    res["load"] = (load0, os.getloadavg()[0])
    (WORK / ("results-quick.json" if q else "results.json")).write_text(json.dumps(res, indent=1, default=str))
    Path(a.out).write_text(report(res, q))
    print()
    print_table(res)
    print(f"\nwrote {a.out} ({res['wall_s']:.0f} s)")
    return 0


def dry(a: argparse.Namespace) -> int:
    """What CI's smoke test runs (tests/project/test_bench.py): every section's module imported (above), the
    options checked, and the report and table of a run that measured nothing written, in seconds."""
    only = {s.strip() for s in a.only.split(",")}
    if not only <= {"1", "2", "3", "4", "5"}:
        raise SystemExit(f"run.py: error: --only {a.only!r}: the sections are 1-5")
    WORK.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"machine": machine(), "wall_s": 0.0, "quick": a.quick, "load": os.getloadavg()[:2]}
    Path(a.out).write_text(report(res, a.quick))
    print_table(res)
    print(f"\nwrote {a.out} (--dry: no job started)")
    return 0


def _counts(text: str) -> list[int]:
    """``--launch-ns 2,4``: rank counts, each at least 1 (argparse turns the error into one line)."""
    try:
        ns = [int(n) for n in text.split(",")]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rank counts")
    return ns


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        kill_all()
        sys.exit(130)
