"""The job's DAP endpoint (``rtdebug dap``): attach-all through it against each rank's port directly, and what it
costs a job while it serves no client.

    bash scripts/bench.sh probes/dap_bench --ranks 4,16 --reps 3 --rounds 3

Attach-all (per rank count, one fresh ``rtdebug torchrun`` job per round, every rank training in a gloo DDP
loop): a first attach-all is made and discarded (it imports debugpy in every rank), then ``direct`` (a DAP
client per rank, all at once, ``initialize`` … ``configurationDone``) and ``endpoint`` (one client attaches
to ``rtdebug dap``, answers each ``startDebugging`` by attaching a child to that rank at once, as nvim-dap
does) alternate ``--reps`` times, detaching everything in between. Timed: first connect -> every rank's
attach answered. Reported: median per kind and the ratio endpoint / direct (goal <= 1.2).

Idle cost: three 2-rank DDP jobs side by side, each rank pinned as the suite's section 1 does (cores swapped
every round): ``lazy`` (rtdebug torchrun), ``dap`` (the same with ``--dap-port``: its endpoint serving, no
client) and ``lazy2`` (A/A). Three phases of steps/s windows each (``bench/suite/loop.py``); the ratio is
dap / lazy per phase (goal >= 0.99), lazy2 / lazy the noise floor.

Writes bench/.work/dap_bench.json and prints the tables; results by hand in bench/results/ (see
docs/performance.md).

Result: bench/results/2026-12-07-dap-endpoint-2.md (attach reads nothing), bench/results/2026-12-07-dap-endpoint.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ATTACH_ALL = Path(__file__).resolve().parent / "attach_all.py"  # its rank program: gloo DDP, steps until ctl/stop


def start(kind: str, n: int, script: Path, args: list[str], dap: bool) -> Any:
    """``rtdebug torchrun`` (``--dap-port`` when ``dap``) of ``script``, with its own registry and control dir."""
    import tempfile

    from bench.suite.common import HOST, PY, WORK, base_env, free_range
    from bench.suite.jobs import Job

    tmp = Path(tempfile.mkdtemp(prefix=f"dap-{kind}-", dir=WORK))
    (tmp / "ctl").mkdir()
    base, master = free_range(n), free_range(1)
    dap_port = free_range(1) if dap else None
    cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(base)]
    cmd += ["--dap-port", str(dap_port)] if dap_port else []
    cmd += ["--nproc-per-node", str(n), "--master-addr", HOST, "--master-port", str(master)]
    cmd += [str(script), "--ctl", str(tmp / "ctl"), *args]
    job = Job(cmd, base_env(tmp / "registry"))
    job.base, job.ctl, job.n, job.dap_port, job.tmp = base, tmp / "ctl", n, dap_port, tmp
    return job


# -- attach-all --------------------------------------------------------------------
def direct(job: Any) -> tuple[float, list]:
    from bench.suite.common import HOST

    from support.dap import DAPClient

    clients: list = [None] * job.n
    done: list = [None] * job.n

    def one(i: int) -> None:
        c = clients[i] = DAPClient(HOST, job.base + i, timeout=120)
        c.attach({})
        done[i] = time.time()

    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(job.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    if None in done:
        raise RuntimeError("direct attach-all did not finish")
    return max(done) - t0, clients


def endpoint(job: Any) -> tuple[float, list]:
    from bench.suite.common import HOST

    from support.dap import DAPClient

    done: list[float] = []
    kids: list = []
    errors: list[BaseException] = []
    t0 = time.time()
    parent = DAPClient(HOST, job.dap_port, timeout=120)
    parent.response(parent.attach_job())

    def child(req: dict) -> None:
        try:
            config = req["arguments"]["configuration"]
            c = DAPClient(config["connect"]["host"], config["connect"]["port"], timeout=120)
            kids.append(c)
            c.attach({}, **{k: v for k, v in config.items() if k != "request"})
            parent.answer(req)
            done.append(time.time())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = []
    for _ in range(job.n):  # each child attaches as soon as it is announced, as nvim-dap's do
        req = parent.reverse_request("startDebugging", 120)
        threads.append(threading.Thread(target=child, args=(req,), daemon=True))
        threads[-1].start()
    for t in threads:
        t.join(150)
    if errors or len(done) != job.n:
        raise RuntimeError(f"attach-all through the endpoint failed: {errors[:1] or 'timeout'}")
    return max(done) - t0, [*kids, parent]


def attach_round(n: int, reps: int, rnd: int) -> dict[str, list[float]]:
    from bench.suite.jobs import disconnect_all, wait_files

    job = start("attach", n, ATTACH_ALL, ["--train"], dap=True)
    try:
        wait_files([job.ctl / f"warm-{r}" for r in range(n)], 600, job)
        job.wait_line("DAP endpoint for session", 60)
        _, clients = direct(job)  # the first attach imports debugpy in every rank: not timed
        disconnect_all(clients)
        out: dict[str, list[float]] = {"direct": [], "endpoint": []}
        kinds = ["direct", "endpoint"] if rnd % 2 == 0 else ["endpoint", "direct"]
        for _ in range(reps):
            for kind in kinds:
                time.sleep(1.0)  # every rank back to running, detached
                took, clients = (direct if kind == "direct" else endpoint)(job)
                out[kind].append(took)
                disconnect_all(clients)
        return out
    finally:
        job.kill()


# -- idle cost ---------------------------------------------------------------------
PHASES = ("p1", "p2", "p3")
PHASE_KINDS = ("lazy", "dap", "lazy2")


def idle_round(rnd: int, window: float, windows: int) -> dict[str, dict[str, float]]:
    from bench.suite.common import LOOP, touch
    from bench.suite.jobs import read_phase, wait_files

    args = ["--mode", "ddp", "--window", str(window), "--windows", str(windows), "--phases", ",".join(PHASES)]
    args += ["--hold", "--pin", str(rnd % 2)]
    order = [("lazy", False), ("dap", True), ("lazy2", False)]
    order = order[rnd % 3 :] + order[: rnd % 3]
    jobs = {}
    try:
        for kind, dap in order:
            jobs[kind] = start(kind, 2, LOOP, args, dap)
        for j in jobs.values():
            wait_files([j.ctl / f"warm-{r}" for r in range(2)], 300, j)
        got: dict[str, dict[str, float]] = {k: {} for k in jobs}
        server = next(m for m in jobs["dap"].members() if "dap" in m.cmdline()[3:5])  # `python -m rtdebug dap`
        cpu0, wall0 = sum(server.cpu_times()[:2]), time.monotonic()
        for ph in PHASES:
            for j in jobs.values():
                touch(j.ctl / f"go-{ph}")
            for k, j in jobs.items():
                got[k][ph] = read_phase(j.ctl, ph, 2, j)["wall"]
        got["endpoint_cpu"] = {"share": (sum(server.cpu_times()[:2]) - cpu0) / (time.monotonic() - wall0)}
        for j in jobs.values():
            touch(j.ctl / "stop")
        return got
    finally:
        for j in jobs.values():
            j.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="4,16", help="rank counts for attach-all")
    p.add_argument("--reps", type=int, default=3, help="timed attach-alls of each kind per job")
    p.add_argument("--rounds", type=int, default=3, help="fresh jobs per rank count, and idle-cost rounds")
    p.add_argument("--only", default="attach,idle", help="attach, idle or both")
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--windows", type=int, default=3)
    a = p.parse_args()
    from bench.suite.common import WORK, log
    from bench.suite.jobs import kill_all

    WORK.mkdir(exist_ok=True)
    res: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "attach": {}}
    try:
        if "attach" in a.only:
            for n in [int(x) for x in a.ranks.split(",")]:
                raw: dict[str, list[float]] = {"direct": [], "endpoint": []}
                for rnd in range(a.rounds):
                    log(f"attach-all {n} ranks, round {rnd + 1}/{a.rounds}")
                    got = attach_round(n, a.reps, rnd)
                    for k in raw:
                        raw[k] += got[k]
                    log("  " + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in got.items()))
                med = {k: statistics.median(v) for k, v in raw.items()}
                res["attach"][str(n)] = {"raw": raw, "median": med, "ratio": med["endpoint"] / med["direct"]}
        if "idle" in a.only:
            rounds = []
            for rnd in range(a.rounds):
                log(f"idle cost, round {rnd + 1}/{a.rounds}")
                rounds.append(idle_round(rnd, a.window, a.windows))
                r = rounds[-1]
                log(
                    "  "
                    + ", ".join(f"{k} {statistics.median(r[k].values()):.1f} steps/s" for k in r if k in PHASE_KINDS)
                )
            ratio = [r["dap"][ph] / r["lazy"][ph] for r in rounds for ph in PHASES]
            aa = [r["lazy2"][ph] / r["lazy"][ph] for r in rounds for ph in PHASES]
            cpu = [r["endpoint_cpu"]["share"] for r in rounds]
            res["idle"] = {"rounds": rounds, "dap/lazy": ratio, "lazy2/lazy": aa, "endpoint_cpu": cpu,
                           "median": statistics.median(ratio), "aa_median": statistics.median(aa)}  # fmt: skip
    finally:
        kill_all()
    out = WORK / "dap_bench.json"
    out.write_text(json.dumps(res, indent=1))
    print(report(res))
    return 0


def report(res: dict) -> str:
    lines = ["| ranks | direct (s) | through the endpoint (s) | endpoint / direct |", "|---|---|---|---|"]
    for n, d in res["attach"].items():
        m = d["median"]
        lines.append(f"| {n} | {m['direct']:.2f} | {m['endpoint']:.2f} | **{d['ratio']:.2f}** |")
    if "idle" in res:
        i = res["idle"]
        span = f"{min(i['dap/lazy']):.3f}-{max(i['dap/lazy']):.3f}"
        lines += ["", f"idle endpoint, steps/s dap / lazy: **{i['median']:.3f}** ({span}, n={len(i['dap/lazy'])}); "
                  f"A/A lazy2 / lazy {i['aa_median']:.3f}; the endpoint's own CPU: "
                  f"{100 * statistics.median(i['endpoint_cpu']):.3f} % of one core"]  # fmt: skip
    return "\n".join(re.sub(r"\s+$", "", x) for x in lines)


if __name__ == "__main__":
    sys.exit(main())
