"""What the second look costs (issue 43 item 5); writes bench/results/DATE-stacks-window.md.

``rtdebug stacks`` gives a verdict only when every rank's collective position stays put across a window
(``rtdebug.stacks.motion``): on a hung job it waits ``WINDOW_S`` after the first dump, reads the records
again and takes a second dump. Measured on a hung 4-rank job (examples/hang.py, gloo, CPU):

1. the whole CLI, ``rtdebug stacks --json`` against ``rtdebug stacks --json --snapshot`` (the instant, one
   dump), alternated so that load drifts hit both alike; goal: the window adds <= 0.5 s;
2. the same in process (``motion.settle`` over ``collect`` against one ``collect``), without the interpreter.

Every answer must carry the verdict (``culprit`` 1): a window that called the hung job moving would be a bug.

    bash scripts/bench.sh probes/stacks_window_bench [--repeats N]   # ~1 min on 2 cores

Result: bench/results/2026-12-07-stacks-window.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rtdebug.registry.files import Registry
from rtdebug.stacks import collect as stacks
from rtdebug.stacks import motion

from support.ports import free_port_base
from support.procs import kill_tree

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
NPROC = 4


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen(
            [PY, "-m", "rtdebug", *args], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )


def session_of(log: Path, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "rtdebug: session " in text:
            return text.split("rtdebug: session ", 1)[1].split()[0]
        time.sleep(0.2)
    raise RuntimeError(f"no session line in {log}:\n{log.read_text()[-2000:]}")


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}–{max(xs):.3f}] (n={len(xs)})"


def cli(sid: str, env: dict[str, str], *flags: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [PY, "-m", "rtdebug", "stacks", "--json", "--session", sid, *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return took, json.loads(out.stdout)


def wait_hung(reg: Registry, sid: str, job: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 600
    while True:  # until the instant verdict names rank 1 (every rank in its collective)
        session = reg.read_session(sid)
        if session is not None and stacks.collect(reg, session, None, timeout=5).get("culprit") == 1:
            return
        if time.monotonic() > deadline or job.poll() is not None:
            raise RuntimeError(f"the ranks never hung:\n{log.read_text()[-3000:]}")
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rtdebug-window-"))
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(tmp / "reg"), PYTHONUNBUFFERED="1")
    os.environ["RTDEBUG_REGISTRY_DIR"] = env["RTDEBUG_REGISTRY_DIR"]
    reg = Registry()
    log = tmp / "hang.log"
    # a long process-group timeout: the job stays hung for the whole run
    base = free_port_base(NPROC + 1, 41000, 59000)
    cmd = ["torchrun", "--debug-port-base", str(base), "--pg-timeout", "900", "--hang-report", "0",
           "--nproc-per-node", str(NPROC), str(ROOT / "examples" / "hang.py")]  # fmt: skip
    job = start(cmd, env, log)
    rows: dict[str, list[float]] = {"window": [], "instant": [], "settle": [], "collect": []}
    states: set[str] = set()
    try:
        sid = session_of(log)
        wait_hung(reg, sid, job, log)
        session = reg.read_session(sid)
        assert session is not None
        for _ in range(args.repeats):
            took, snap = cli(sid, env)
            assert snap["culprit"] == 1 and snap["motion"]["state"] == "still", snap["motion"]
            rows["window"].append(took)
            took, snap = cli(sid, env, "--snapshot")
            assert snap["culprit"] == 1, snap["verdict"]
            rows["instant"].append(took)
            t0 = time.perf_counter()
            snap = motion.settle(
                lambda: stacks.collect(reg, session, None, 3.0), lambda: stacks.records(reg, session, None)
            )
            rows["settle"].append(time.perf_counter() - t0)
            states.add(snap["motion"]["state"])
            assert snap["culprit"] == 1
            t0 = time.perf_counter()
            stacks.collect(reg, session, None, 3.0)
            rows["collect"].append(time.perf_counter() - t0)
    finally:
        kill_tree(job)
    extra = [w - i for w, i in zip(rows["window"], rows["instant"], strict=True)]
    extra_in = [s - c for s, c in zip(rows["settle"], rows["collect"], strict=True)]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    day, when = time.strftime("%Y-%m-%d", time.gmtime()), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    verdict = "met" if statistics.median(extra) <= 0.5 else "NOT met"
    text = f"""# `rtdebug stacks`: what the second look costs on a hung job (bench/probes/stacks_window_bench.py)

{when}: {os.cpu_count()} CPUs ({platform.machine()}), load average {load} at the end;
Python {platform.python_version()}. {NPROC} ranks of examples/hang.py (gloo, CPU), hung: rank 1 in a barrier,
ranks 0,2,3 in an all_reduce. Window `WINDOW_S` = {motion.WINDOW_S} s. Median [min–max] (n). Every answer carried
the verdict (culprit rank 1); the in-process second look ended as {sorted(states)}.

| Measure | Result | Goal | |
|---|---|---|---|
| `rtdebug stacks --json` (dump, wait, records, second dump), CLI start → answer, s | {med(rows["window"])} | | |
| `rtdebug stacks --json --snapshot` (one dump), CLI start → answer, s | {med(rows["instant"])} | | |
| **extra time of the window** (each pair: window − instant), s | **{med(extra)}** | ≤ 0.5 s | {verdict} |
| ↳ in process: `motion.settle` over `collect`, s | {med(rows["settle"])} | | |
| ↳ in process: one `collect`, s | {med(rows["collect"])} | | |
| ↳ in process, extra (settle − collect), s | {med(extra_in)} | | |

The window is slept once ({motion.WINDOW_S} s, counted from the first dump's end, so that a rank which paused to
answer gets the whole window to move); the rest is the second dump. It is spent only when a verdict is on the
table, and not at all when a rank is stopped in the debugger, stopped by a signal or has exited.
"""
    out = ROOT / "bench" / "results" / f"{day}-stacks-window.md"
    out.write_text(text)
    print(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
