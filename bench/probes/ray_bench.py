"""Ray Train workers (num_workers > 0): what a ready-to-attach endpoint costs, and attach-all latency.

One small Ray cluster on this machine (``tests/support/raycluster.py``: its own temp
dir and ports, ended by its own pids). Each round starts three 2-worker TorchTrainer
jobs of ``bench/probes/ray_job.py`` on it: two plain ``python`` drivers (A and B; B/A is the
noise floor) and one ``rtdebug run`` driver (H) whose workers have the lazy endpoint.
All three stay up; the bench then gives turns of ``--window`` seconds to two jobs at a
time, each pinned whole to its own core while the third sleeps. A cycle is six turns:
A|H, H|A, B|H, H|B, A|B, B|A (left on core 0): each ratio is taken between two jobs
that ran at the same moments, and every pair runs once on each side, so neither other
load nor a faster core favours one of them. A cycle gives H / plain (geometric mean of
its four H turns) and B / A (of its two A-B turns). Then two DAP clients attach to H's
workers in parallel with one breakpoint: the time until both report ``stopped`` is
the attach-all latency.

    bash scripts/bench.sh probes/ray_bench [--rounds 3] [--cycles 8] [--window 4]   # writes bench/results/DATE-ray.md

Result: bench/results/2026-12-03-ray.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.suite.common import median_ci

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "bench" / "probes" / "ray_job.py"

LABELS = ("plain_a", "harness", "plain_b")
PAIRS = [("plain_a", "harness"), ("harness", "plain_a"), ("plain_b", "harness"), ("harness", "plain_b")]
PAIRS += [("plain_a", "plain_b"), ("plain_b", "plain_a")]  # (core 0, core 1): one cycle
METRICS = ("steps_per_s", "cpu_ms_per_step", "best_steps_per_s", "rtdebug_cpu_s", "cpu_s", "rtdebug_threads")


def _line(mark: str) -> int:
    return next(i for i, text in enumerate(JOB.read_text().splitlines(), 1) if mark in text)


def _attach_all(ports: list[int]) -> float:
    from support.dap import DAPClient

    line, path, out = _line("# BENCH-HOLD"), str(JOB), {}
    t0 = time.monotonic()

    def one(port: int) -> None:
        c = DAPClient("127.0.0.1", port)
        c.attach({path: [line]})
        ev = c.wait_stopped(120)
        out[port] = time.monotonic() - t0
        c.request("setBreakpoints", source={"path": path}, breakpoints=[])
        c.continue_(ev["threadId"])
        c.disconnect()

    threads = [threading.Thread(target=one, args=(p,)) for p in ports]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return max(out.values()) if len(out) == len(ports) else float("nan")


def _harness_ports(address: str, env: dict, procs: dict, timeout: float = 900) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check(procs)
        r = subprocess.run(
            [sys.executable, "-m", "rtdebug", "ps", "--json", "--ray-address", address],
            env=env, capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        for s in json.loads(r.stdout or '{"sessions": []}')["sessions"]:
            ports = [x["port"] for x in s["ranks"] if x["state"] in ("ready", "attached")]
            if s["mode"] == "ray" and len(ports) == 2:
                return sorted(ports)
        time.sleep(2)
    raise RuntimeError("harness workers never became ready")


def _check(procs: dict) -> None:
    for k, p in procs.items():
        if p.poll() not in (None, 0):
            raise RuntimeError(f"job {k} failed (exit {p.returncode}); see its log")


def _wait_files(ctl: Path, names: list[str], procs: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all((ctl / n).exists() for n in names):
        _check(procs)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {names} in {ctl}")
        time.sleep(0.05)


def _turn(ctl: Path, text: str) -> None:
    tmp = ctl / "turn.tmp"
    tmp.write_text(text)
    os.replace(tmp, ctl / "turn")  # a worker never reads half a turn


def _window(ctl: Path, seq: int, pair: tuple[str, str], window: float, procs: dict) -> dict:
    """One turn of two jobs: per metric and job, steps/s of the slower worker, CPU ms per step (both
    workers pooled), steps/s in the fastest 0.5 s."""
    start = time.time() + 0.3
    _turn(ctl, f"{seq} {start!r} {start + window!r} {pair[0]}:0 {pair[1]}:1")
    names = {k: [f"res-{k}-{seq}-{r}" for r in (0, 1)] for k in pair}
    _wait_files(ctl, names[pair[0]] + names[pair[1]], procs, window + 120)
    out: dict = {"pair": list(pair), **{m: {} for m in METRICS}}
    for k in pair:
        rows = [(ctl / n).read_text().split() for n in names[k]]
        steps = [int(r[0]) for r in rows]
        out["steps_per_s"][k] = min(steps) / window
        out["cpu_ms_per_step"][k] = 1000 * sum(float(r[1]) for r in rows) / max(sum(steps), 1)
        out["best_steps_per_s"][k] = min(float(r[2]) for r in rows)
        out["rtdebug_cpu_s"][k] = sum(float(r[3]) for r in rows)
        out["cpu_s"][k] = sum(float(r[1]) for r in rows)
        out["rtdebug_threads"][k] = min(int(r[4]) for r in rows)
    return out


def one_round(address: str, work: Path, cycles: int, window: float, port: int) -> dict:
    ctl = work / "ctl"
    ctl.mkdir(parents=True)
    env = dict(os.environ, RAY_ADDRESS=address, RAY_DEDUP_LOGS="0", PYTHONUNBUFFERED="1")
    env["RTDEBUG_REGISTRY_DIR"] = str(work / "reg")
    job = [str(JOB), "--ctl", str(ctl), "--storage", str(work / "results"), "--label"]
    cmds = {
        "plain_a": [sys.executable, *job, "plain_a"],
        "plain_b": [sys.executable, *job, "plain_b"],
        "harness": [sys.executable, "-m", "rtdebug", "run", "--port", str(port), *job, "harness", "--hold"],
    }
    procs = {
        k: subprocess.Popen(c, env=env, cwd=ROOT, stdout=open(work / f"{k}.log", "wb"), stderr=subprocess.STDOUT)
        for k, c in cmds.items()
    }
    out: dict = {"windows": []}
    try:
        ports = _harness_ports(address, env, procs)
        _wait_files(ctl, [f"ready-{k}-{r}" for k in LABELS for r in (0, 1)], procs, 600)
        seq = 0
        for _ in range(cycles):
            for pair in PAIRS:
                seq += 1
                out["windows"].append(_window(ctl, seq, pair, window, procs))
        _turn(ctl, "stop")
        out["attach_all_s"] = _attach_all(ports)
        (ctl / "hold").write_text("")
        for k, p in procs.items():
            try:
                p.wait(300)
            except subprocess.TimeoutExpired:  # the windows are in: say so, and end it below
                print(f"bench: job {k} did not exit 300 s after the run ended (pid {p.pid}); killed", flush=True)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return out


def ratios(rounds: list[dict], key: str) -> tuple[list[float], list[float]]:
    """Per cycle: harness / plain over its four H turns, plain_b / plain_a over its two A-B turns."""
    h_over_plain, b_over_a = [], []
    for r in rounds:
        wins = r["windows"]
        for c in range(0, len(wins) - len(PAIRS) + 1, len(PAIRS)):
            h, aa = [], []
            for w in wins[c : c + len(PAIRS)]:
                v = w[key]
                if "harness" in v:
                    other = next(k for k in v if k != "harness")
                    h.append(v["harness"] / v[other])
                else:
                    aa.append(v["plain_b"] / v["plain_a"])
            h_over_plain.append(statistics.geometric_mean(h))
            b_over_a.append(statistics.geometric_mean(aa))
    return h_over_plain, b_over_a


def _med(xs: list[float]) -> str:
    ci = median_ci(xs)
    span = f"; 95 % CI of the median {ci[0]:.3f}–{ci[1]:.3f}" if ci else ""
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}–{max(xs):.3f}] (n={len(xs)}{span})"


def verdict(xs: list[float], goal: float, higher_is_better: bool, aa: list[float] | None = None) -> str:
    """Say "met" only when the whole interval of the median is on the right side of the goal, and the
    A/A control (two identical jobs) is not itself off 1: then the cycles share a job-to-job offset that
    their interval does not include."""
    ci, aa_ci = median_ci(xs), median_ci(aa) if aa else None
    if ci is None:
        return "not resolved (n < 5)"
    if aa_ci is not None and not aa_ci[0] <= 1.0 <= aa_ci[1]:
        return "not resolved: identical jobs differ (A/A interval excludes 1)"
    lo, hi = (ci[0], ci[1]) if higher_is_better else (-ci[1], -ci[0])
    g = goal if higher_is_better else -goal
    return "met" if lo >= g else "not met" if hi < g else "not resolved"


def per_round(rounds: list[dict], key: str) -> str:
    """Median H / plain and A/A of each round: fresh jobs, so their spread shows the job-to-job offset."""
    meds = [[statistics.median(x) for x in ratios([r], key)] for r in rounds]
    return ", ".join(f"{h:.3f} (A/A {aa:.3f})" for h, aa in meds)


def report(args, rounds: list[dict], when: str = "", load: float | None = None) -> str:
    import ray
    import torch

    rate, rate_aa = ratios(rounds, "steps_per_s")
    cpu, cpu_aa = ratios(rounds, "cpu_ms_per_step")
    best, best_aa = ratios(rounds, "best_steps_per_s")
    att = [r["attach_all_s"] for r in rounds]
    turns = [w for r in rounds for w in r["windows"] if "harness" in w["pair"]]
    own, total = (sum(w[m]["harness"] for w in turns) for m in ("rtdebug_cpu_s", "cpu_s"))
    n_own = min((w["rtdebug_threads"]["harness"] for w in turns), default=0)
    own_s = f"{own * 1e3:.2f} ms of {total:.1f} s ({own / max(total, 1e-9):.1e}; rtdebug threads per worker: {n_own})"
    v_rate, v_cpu = verdict(rate, 0.99, True, rate_aa), verdict(cpu, 1.01, False, cpu_aa)
    att_s = f"{statistics.median(att):.3f} s [{min(att):.3f}–{max(att):.3f}]"
    cmd = f"bench/probes/ray_bench.py --rounds {args.rounds} --cycles {args.cycles} --window {args.window:g}"
    when = when or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0] if load is None else load
    return f"""# Ray Train workers: bench results

`{cmd}`, {when}; {os.cpu_count()} CPUs, load average {load:.1f} at the end,
Python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}.
Each round: three 2-worker TorchTrainer jobs on one local Ray cluster; turns of {args.window:g} s in which
two jobs train at the same time, each pinned to its own core, while the third sleeps; a cycle is six turns
(A|H, H|A, B|H, H|B, A|B, B|A). Ratios are per cycle (geometric mean of its turns): median [min–max]
(n cycles; 95 % bootstrap interval of the median).

| Measure | Result | Goal | Verdict |
|---|---|---|---|
| steps/s, worker ready to attach (nobody attached) / plain worker | **{_med(rate)}** | ≥ 0.99 | {v_rate} |
| ↳ noise floor: second plain job / first plain job (A/A) | {_med(rate_aa)} | | |
| CPU per step of a worker process (all its threads), ready to attach / plain | **{_med(cpu)}** | ≤ 1.01 | {v_cpu} |
| ↳ noise floor (A/A) | {_med(cpu_aa)} | | |
| per round (fresh jobs), steps/s: median of H / plain | {per_round(rounds, "steps_per_s")} | | |
| per round (fresh jobs), CPU per step: median of H / plain | {per_round(rounds, "cpu_ms_per_step")} | | |
| steps/s in the fastest 0.5 s of a window (preemption filtered out), ready to attach / plain | {_med(best)} | | |
| ↳ noise floor (A/A) | {_med(best_aa)} | | |
| CPU of rtdebug's own threads in ready workers / the workers' CPU, all H turns | {own_s} | | |
| attach-all, 2 workers: two DAP clients in parallel, one breakpoint, until both `stopped` | {att_s} | | |

The CPU rows see the same question without the scheduler's share in it: a worker that does more per
step (tracing, polling, a busy thread) needs more CPU per step. The fastest-0.5 s rows leave out the
moments when something else on the machine (Ray's own processes, the idle job, other tenants)
preempted a worker, which stalls its partner at the next all-reduce. The per-round rows compare fresh
jobs: two identical plain jobs can differ by several per cent for their whole life (A/A per round), an
offset that the per-cycle interval cannot see, so a verdict is "met" only while the A/A interval holds 1.

Raw rounds (per turn and job: steps/s of the slower worker; CPU ms per step, both workers pooled;
steps/s in the fastest 0.5 s of the slower worker):

```
{chr(10).join(json.dumps(r) for r in rounds)}
```
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="fresh jobs per round (default 3)")
    p.add_argument("--cycles", type=int, default=8, help="cycles of six turns per round (default 8)")
    p.add_argument("--window", type=float, default=4.0, help="seconds of one turn (default 4)")
    p.add_argument("--port", type=int, default=47100, help="the harness driver's port; workers use the next ones")
    args = p.parse_args()
    if args.rounds < 1 or args.cycles < 1 or args.window <= 0:
        p.error("--rounds and --cycles must be >= 1 and --window > 0")
    from support.raycluster import AUTH_MODE, RayCluster

    os.environ["RAY_AUTH_MODE"] = AUTH_MODE
    cluster = RayCluster()
    rounds = []
    try:
        address = cluster.start_head(num_cpus=2)
        for _ in range(args.rounds):
            work = Path(tempfile.mkdtemp(prefix="rtdray-bench-"))
            rounds.append(one_round(address, work, args.cycles, args.window, args.port))
            shutil.rmtree(work, ignore_errors=True)  # kept, with the jobs' logs, when a round fails
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        cluster.stop()
    text = report(args, rounds)
    (ROOT / "bench" / "results" / time.strftime("%Y-%m-%d-ray.md", time.gmtime())).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
