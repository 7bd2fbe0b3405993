"""The collective record's cost: step rate with it on against off, its per-call cost, and verdict grouping time.

    bash scripts/bench.sh probes/collrec_bench [--rounds 3] [--windows 6] [--window 2] [--out FILE]

1. Step rate: two `rtdebug torchrun --nproc-per-node 2` gloo jobs run AT THE SAME TIME, one with the record
   on (the default) and one with ``RTDEBUG_COLLECTIVES=0``; rank r of both is pinned to core r, so each core
   runs one rank of each and other load hits both alike. After warm-up both start timed windows at one
   instant; the ratio is on/off steps per window, paired window by window (median, bootstrap 95 % CI).
   Two loops: ``allreduce`` (one 1 KiB all_reduce per step: the worst case, nothing but collectives) and
   ``step`` (a small MLP forward/backward, then its gradients all_reduced: a training step).
2. Per call: the wrapper around a no-op (pure overhead), and a wrapped all_reduce against torch's own on a
   world-size-1 gloo group, in microseconds.
3. Grouping: parse + group + verdict for 1024 synthetic rank dumps (the job-wide answer of a big job).
The same script is also the ranks' loop (``--loop``), so the bench is one file.

Result: bench/results/2026-12-04-collective-record.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.suite.common import PY, ROOT, base_env, free_range, log, median_ci


# -- the ranks' loop ---------------------------------------------------------------------
def loop(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x, flag = torch.randn(32, 64), torch.zeros(256)

    def step() -> bool:
        if args.loop == "step":
            model.zero_grad()
            model(x).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
        dist.all_reduce(flag)  # also carries rank 0's stop flag
        return flag[0].item() > 0

    for _ in range(args.warmup):
        step()
    if rank == 0:
        Path(args.ctl, "warm").touch()
        while not Path(args.ctl, "go").exists():
            time.sleep(0.01)
    rates = []
    n, t0 = 0, time.perf_counter()
    while True:
        if rank == 0 and len(rates) == args.windows:
            flag[0] = 1.0 / dist.get_world_size()
        if step():
            break
        n += 1
        now = time.perf_counter()
        if now - t0 >= args.window and len(rates) < args.windows:
            rates.append(n / (now - t0))
            n, t0 = 0, now
    if rank == 0:
        Path(args.ctl, "rates.json").write_text(json.dumps(rates))
    dist.destroy_process_group()


# -- 1. step rate, side by side -------------------------------------------------------------
def _job(work: Path, name: str, kind: str, a: argparse.Namespace, on: bool) -> tuple[subprocess.Popen, Path]:
    ctl = work / name
    ctl.mkdir()
    env = base_env(work / "registry")
    if not on:
        env["RTDEBUG_COLLECTIVES"] = "0"
    port = free_range(2)
    cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(port), "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_range(1)), __file__, "--loop", kind,
           "--ctl", str(ctl), "--windows", str(a.windows), "--window", str(a.window),
           "--warmup", str(a.warmup)]  # fmt: skip
    log_file = open(ctl / "job.log", "wb")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT), ctl


def _wait(path: Path, procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError(f"{path} never came; see {path.parent / 'job.log'}")
        time.sleep(0.05)


def step_rate(a: argparse.Namespace, kind: str) -> dict:
    ratios: list[float] = []
    absolute: dict[str, list[float]] = {"on": [], "off": []}
    for rnd in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="collrec-bench-") as tmp:
            work = Path(tmp)
            order = [True, False] if rnd % 2 == 0 else [False, True]  # who starts first alternates
            jobs = {on: _job(work, "on" if on else "off", kind, a, on) for on in order}
            procs = [p for p, _ in jobs.values()]
            try:
                for _, ctl in jobs.values():
                    _wait(ctl / "warm", procs, 300)
                for _, ctl in jobs.values():
                    (ctl / "go").touch()
                for p, _ in jobs.values():
                    p.wait(timeout=a.windows * a.window * 4 + 120)
                on, off = (json.loads((jobs[k][1] / "rates.json").read_text()) for k in (True, False))
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        ratios += [x / y for x, y in zip(on, off, strict=False)]
        absolute["on"] += on
        absolute["off"] += off
        log(f"{kind} round {rnd + 1}: on {statistics.median(on):.0f}/s off {statistics.median(off):.0f}/s")
    return {
        "ratio": statistics.median(ratios),
        "ci": median_ci(ratios),
        "n": len(ratios),
        "on_steps_s": statistics.median(absolute["on"]),
        "off_steps_s": statistics.median(absolute["off"]),
    }


# -- 2. per call ------------------------------------------------------------------------------
def per_call(n: int = 20000, repeats: int = 7) -> dict:
    """In a child process: arming patches torch, and a world-size-1 group must not linger in this one."""
    code = f"""
import json, os, sys, tempfile, time
from rtdebug.rank.collectives import recorder as collrec
collrec.arm(None, 0)
import torch, torch.distributed as dist
from rtdebug.registry import collseq
d = tempfile.mkdtemp()
dist.init_process_group("gloo", init_method=f"file://{{d}}/s", rank=0, world_size=1)
noop = lambda *a, **k: None
wrapped_noop = collrec._wrap(noop, collseq.OP_CODES["all_reduce"])
t = torch.ones(1)
def bench(fn, *args):
    t0 = time.perf_counter()
    for _ in range({n}):
        fn(*args)
    return (time.perf_counter() - t0) / {n} * 1e6
out = {{"noop": [], "wrapper": [], "torch": [], "wrapped": []}}
for _ in range({repeats}):
    out["noop"].append(bench(noop, t))
    out["wrapper"].append(bench(wrapped_noop, t))
    out["torch"].append(bench(dist.all_reduce.__wrapped__, t))
    out["wrapped"].append(bench(dist.all_reduce, t))
dist.destroy_process_group()
print(json.dumps(out))
"""
    env = base_env()
    env.pop("RTDEBUG_COLLECTIVES", None)
    res = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=600, check=True)
    raw = json.loads(res.stdout.strip().splitlines()[-1])
    med = {k: statistics.median(v) for k, v in raw.items()}
    return {
        "wrapper_us": med["wrapper"] - med["noop"],
        "torch_all_reduce_us": med["torch"],
        "wrapped_all_reduce_us": med["wrapped"],
        "added_us": med["wrapped"] - med["torch"],
        "added_ci": median_ci([w - t for w, t in zip(raw["wrapped"], raw["torch"], strict=True)]),
    }


# -- 3. grouping 1024 dumps ----------------------------------------------------------------------
def synthetic(rank: int, odd: bool) -> tuple[str, dict]:
    site = "/venv/lib/python3.11/site-packages/torch/distributed"
    top = (f"{site}/distributed_c10d.py", 3252, "barrier" if odd else "all_reduce")
    user = ("/job/train.py", 26 if odd else 42, "evaluate" if odd else "train_step")
    frames = [top, (f"{site}/c10d_logger.py", 83, "wrapper"), user]
    frames += [(f"/job/model{i}.py", 10 + i, f"layer{i}") for i in range(20)] + [("/job/train.py", 99, "<module>")]
    other = [("/usr/lib/python3.11/threading.py", 320, "wait")] * 5
    lines = ["Thread 0x00007f0000000002 (most recent call first):"]
    lines += [f'  File "{f}", line {n} in {fn}' for f, n, fn in other]
    lines += ["", "Current thread 0x00007f0000000001 (most recent call first):"]
    lines += [f'  File "{f}", line {n} in {fn}' for f, n, fn in frames]
    rec = {"op": "BARRIER" if odd else "ALLREDUCE", "seq": 812, "state": "entered", "file": user[0],
           "line": user[1], "func": user[2], "shapes": "[4]", "dtype": "float32", "pg": "0", "since": 1.0}  # fmt: skip
    return "\n".join(lines) + "\n", rec


def grouping(n: int = 1024, repeats: int = 5) -> dict:
    from rtdebug.stacks import group, verdict

    texts = {r: synthetic(r, odd=(r == 517)) for r in range(n)}
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dumps = {r: {"threads": group.parse_dump(t), "main_id": "0x7f0000000001", "collective": c}
                 for r, (t, c) in texts.items()}  # fmt: skip
        snap = {"groups": group.group(dumps)}
        verdict.annotate(snap, dumps)
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "all": times, "verdict": snap["verdict"], "n": n}


def write(out: Path, res: dict, a: argparse.Namespace) -> None:
    def ci(c: list | None) -> str:
        return f"[{c[0]:.3f}, {c[1]:.3f}]" if c else "n/a (fewer than 5 windows)"

    lines = [
        "# Collective record: cost (bench/probes/collrec_bench.py)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this 2-core machine (shared with other work), "
        f"{a.rounds} rounds x {a.windows} windows of {a.window:g} s, jobs side by side.",
        "",
        "| loop | on / off steps/s (median) | 95 % CI | windows | on steps/s | off steps/s |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("allreduce", "step"):
        r = res.get(kind)
        if r:
            lines.append(f"| {kind} | {r['ratio']:.3f} | {ci(r['ci'])} | {r['n']} | "
                         f"{r['on_steps_s']:.0f} | {r['off_steps_s']:.0f} |")  # fmt: skip
    p, g = res.get("per_call"), res.get("grouping")
    if p:
        lines += [
            "",
            f"Per call: the wrapper alone costs {p['wrapper_us']:.2f} µs; a 1-element gloo all_reduce (world size 1) "
            f"takes {p['torch_all_reduce_us']:.1f} µs plain and {p['wrapped_all_reduce_us']:.1f} µs wrapped "
            f"(+{p['added_us']:.2f} µs, CI {ci(p['added_ci'])}).",
        ]
    if g:
        lines += [
            "",
            f"Grouping: parse + group + verdict for {g['n']} synthetic dumps: {g['seconds']:.3f} s median "
            f"(goal <= 0.5 s). Verdict: `{g['verdict']}`",
        ]
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", choices=("allreduce", "step"))
    ap.add_argument("--ctl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--only", default="allreduce,step,per_call,grouping")
    ap.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / time.strftime("%Y-%m-%d-collective-record.md", time.gmtime()))
    )
    a = ap.parse_args()
    if a.loop:
        return loop(a)
    res: dict = {}
    only = a.only.split(",")
    res["grouping"] = grouping() if "grouping" in only else None
    log(f"grouping: {res['grouping']}")
    res["per_call"] = per_call() if "per_call" in only else None
    log(f"per call: {res['per_call']}")
    for kind in ("allreduce", "step"):
        if kind in only:
            res[kind] = step_rate(a, kind)
            log(f"{kind}: {res[kind]}")
    write(Path(a.out), res, a)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
