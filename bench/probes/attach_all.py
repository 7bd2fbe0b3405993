"""Attach-all on a DDP job where every rank trains: lazy ranks against ``--eager``, side by side in one run.

    bash scripts/bench.sh probes/attach_all --ranks 4,16 --rounds 5

What is timed, per job: a real DAP client connects to every rank at once (``initialize``, ``attach``,
a breakpoint, ``configurationDone``), then every rank must report ``stopped``. In a DDP job a rank that
stops holds its peers in their next collective, where no debugger can stop them; so the breakpoint sits on
a line that every rank runs at the same step: once every client's ``configurationDone`` was answered the
bench creates ``ctl/go``, the ranks agree on it with an all-reduce every ``CHECK`` steps, and all of them
run the breakpoint line in that step. Reported: connect -> every rank attached, and connect -> every rank
``stopped`` (the goal's figure, which includes the few traced steps until the agreed one).

Kinds: ``lazy`` (the default rank: debugpy imported in the background ``--warm`` s in, rtdebug.rank.endpoint.warmup;
60 s in a real job, shortened here and waited out before connecting), ``cold`` (lazy without that import,
``RTDEBUG_WARM_S=0``: a first attach imports debugpy, in every rank at once) and ``eager``.
Rounds rotate the order, with a fresh job each time, so machine load hits every kind alike. Each ratio is
median(kind) / median(eager) with a 95 % bootstrap interval (resampling each side's rounds), and the
per-round ratios. The load average is recorded around every measurement.

This file is also the rank program (``--train``): a small MLP under gloo DDP, CPU, synthetic data.

Result: bench/results/2026-12-04-attach-all.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

CHECK = 4  # steps between the ranks' agreement on ctl/go and ctl/stop


# -- the rank program -----------------------------------------------------------
def train(ctl: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank = dist.get_rank()
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 32)
    y = x.sum(dim=1, keepdim=True)
    flag = torch.zeros(1)
    step = 0
    while True:
        if step % CHECK == 0:
            flag[0] = 2.0 if os.path.exists(os.path.join(ctl, "stop")) else float(os.path.exists(f"{ctl}/go"))
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() >= 2:
                break
            if flag.item() == 1:
                agreed = step  # ATTACH-ALL-BREAKPOINT: every rank runs this line in the same step
                del agreed
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 30:
            with open(os.path.join(ctl, f"warm-{rank}"), "w") as f:
                f.write(repr(time.time()))
    dist.destroy_process_group()


# -- the bench ------------------------------------------------------------------
def breakpoint_line() -> int:
    for i, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        if "ATTACH-ALL-BREAKPOINT" in line and "agreed = step" in line:
            return i
    raise RuntimeError("no ATTACH-ALL-BREAKPOINT line")


def measure(r, n: int, line: int) -> dict[str, float]:
    """Connect to every rank at once; connect -> all attached, connect -> all stopped (seconds)."""
    from bench.suite.common import HOST, touch

    from support.dap import DAPClient

    bp = {str(Path(__file__).resolve()): [line]}
    attached: list = [None] * n
    stopped: list = [None] * n
    clients: list = [None] * n
    errors: list[BaseException] = []
    all_attached = threading.Event()

    def one(i: int) -> None:
        try:
            c = clients[i] = DAPClient(HOST, r.base + i, timeout=120)
            c.attach(bp)
            attached[i] = time.time()
            if None not in attached:
                all_attached.set()
            c.wait_stopped(120)
            stopped[i] = time.time()
        except BaseException as exc:  # reported below
            errors.append(exc)
            all_attached.set()

    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    all_attached.wait(150)
    touch(r.ctlf("go"))
    for t in threads:
        t.join(150)
    for c in clients:
        if c is not None:
            c.close()
    if errors or None in stopped:
        raise RuntimeError(f"attach-all failed: {errors[:1] or 'timeout'}")
    return {"attached": max(attached) - t0, "stopped": max(stopped) - t0}


def one_job(kind: str, n: int, line: int, settle: float, warm: float) -> dict[str, float]:
    from bench.suite.jobs import Run, wait_files

    # lazy ranks import debugpy in the background `warm` s after they start (rtdebug.rank.endpoint.warmup; 60 s by
    # default, shortened here so a round takes less); "cold" ranks never do: the lazy rank before it
    extra = {"RTDEBUG_WARM_S": repr(warm)} if kind == "lazy" else {}
    r = Run(kind, n, ["--train"], script=Path(__file__).resolve(), env_extra=extra)
    started = time.monotonic()
    try:
        wait_files(r.rank_files("warm"), 300, r.job)
        if kind == "lazy":  # past the delay, and a few seconds for the import itself in every rank
            time.sleep(max(0.0, warm + 3.0 - (time.monotonic() - started)))
        time.sleep(settle)  # the job in steady training, every rank stepping
        load = os.getloadavg()[0]
        out = measure(r, n, line)
        out["load"] = load
        return out
    finally:
        r.close()


def ratio_ci(a: list[float], b: list[float], reps: int = 4000, seed: int = 0) -> list[float] | None:
    """95 % bootstrap interval of median(a) / median(b), each side resampled on its own."""
    if len(a) < 3 or len(b) < 3:
        return None
    rng = random.Random(seed)
    rs = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b))) for _ in range(reps)
    )
    return [rs[int(0.025 * reps)], rs[int(0.975 * reps) - 1]]


def run_bench(ranks: list[int], rounds: int, kinds: list[str], settle: float, warm: float) -> dict:
    from bench.suite.common import log, summary
    from bench.suite.jobs import guarded

    line = breakpoint_line()
    res: dict = {"line": line, "rounds": rounds, "check_every": CHECK, "kinds": kinds, "warm_s": warm, "by_n": {}}
    for n in ranks:
        raw: dict[str, list] = {k: [] for k in kinds}
        for rnd in range(rounds):
            order = kinds[rnd % len(kinds) :] + kinds[: rnd % len(kinds)]
            for kind in order:
                log(f"attach-all {n} ranks, round {rnd + 1}/{rounds}: {kind}")
                got = guarded(
                    res, f"{n} ranks {kind} round {rnd + 1}", lambda k=kind, n=n: one_job(k, n, line, settle, warm)
                )
                raw[kind].append(dict(got or {}, round=rnd))
                if got:
                    log(f"  attached {got['attached']:.2f} s, stopped {got['stopped']:.2f} s, load {got['load']:.1f}")
        res["by_n"][str(n)] = {"raw": raw, **stats(raw, kinds, summary)}
    return res


def stats(raw: dict[str, list], kinds: list[str], summary) -> dict:
    out: dict = {"abs": {}, "ratio": {}}
    for k in kinds:
        for m in ("attached", "stopped", "load"):
            out["abs"][f"{k}_{m}"] = summary([x.get(m) for x in raw[k]])
    base = "eager"
    for k in kinds:
        if k == base:
            continue
        for m in ("attached", "stopped"):
            a = [x[m] for x in raw[k] if m in x]
            b = [x[m] for x in raw[base] if m in x]
            if a and b:
                per_round = [
                    x[m] / y[m] for x in raw[k] for y in raw[base] if x["round"] == y["round"] and m in x and m in y
                ]
                out["ratio"][f"{k}/{base}_{m}"] = {
                    "ratio_of_medians": statistics.median(a) / statistics.median(b),
                    "ci95": ratio_ci(a, b),
                    "per_round": per_round,
                }
    return out


def report(res: dict) -> str:
    from bench.suite.common import fmt

    rows = [
        "| ranks | kind | connect → all attached (s) | connect → all `stopped` (s) | load avg (1 min) |",
        "|---|---|---|---|---|",
    ]
    ratios = ["| ranks | ratio | median ratio | 95 % CI | per round |", "|---|---|---|---|---|"]
    for n, d in res["by_n"].items():
        for k in res["kinds"]:
            a = d["abs"]
            rows.append(
                f"| {n} | {k} | {fmt(a[k + '_attached'])} | {fmt(a[k + '_stopped'])} | {fmt(a[k + '_load'], 1)} |"
            )
        for name, r in d["ratio"].items():
            ci = "–".join(f"{v:.2f}" for v in r["ci95"]) if r["ci95"] else "n/a"
            pr = ", ".join(f"{v:.2f}" for v in r["per_round"])
            ratios.append(f"| {n} | {name} | **{r['ratio_of_medians']:.2f}** | {ci} | {pr} |")
    return "\n".join(rows) + "\n\n" + "\n".join(ratios) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", action="store_true", help="(the rank program)")
    p.add_argument("--ctl", help="(the rank program's control directory)")
    p.add_argument("--ranks", default="4,16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--kinds", default="lazy,cold,eager", help="configurations, interleaved (eager is the base)")
    p.add_argument("--warm", type=float, default=5.0, help="RTDEBUG_WARM_S for the lazy ranks (default 60 s in a job)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds of training after warmup, before connect")
    p.add_argument("--out", default=None, help="JSON results (default bench/.work/attach_all.json)")
    a = p.parse_args()
    if a.train:
        train(a.ctl)
        return 0
    from bench.suite.common import WORK
    from bench.suite.jobs import kill_all

    WORK.mkdir(exist_ok=True)
    try:
        res = run_bench([int(x) for x in a.ranks.split(",")], a.rounds, a.kinds.split(","), a.settle, a.warm)
    finally:
        kill_all()
    res["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    out = Path(a.out) if a.out else WORK / "attach_all.json"
    out.write_text(json.dumps(res, indent=1))
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
