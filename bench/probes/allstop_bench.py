"""All-stop: one rank's stop -> every other rank paused, done by the ranks against done by a client; and its idle cost.

    bash scripts/bench.sh probes/allstop_bench [--ranks 2,4] [--trials 8] [--pairs 30] [--what latency,step,idle]

Latency: an ``rtdebug torchrun`` job of N ranks (gloo), each step ``--busy`` s of pure Python, then one all_reduce;
rank 1 has a breakpoint line right after it. A DAP client (``tests/support/dap.py``) is attached to every
rank. Per trial the breakpoint is set in rank 1, and the time from its ``stopped`` event to the last other
rank's ``stopped`` event is taken at the client. ``ranks``: all-stop in the ranks (the default; set here as
``RTDEBUG_ALL_STOP=1``). ``client``: all-stop off in the ranks; on rank 1's ``stopped`` the client does what the
VS Code extension's own all-stop did before it left all-stop to the ranks (``threads``, then ``pause`` of the
main thread, in every other rank), minus VS Code's own event dispatch. Then everything is continued.

Step over a collective (step-all): the same job shape, each step ``--step-busy`` s of pure Python then one
all_reduce, a breakpoint line in rank 1 right after it, a client on every rank. Per trial rank 1 stops there,
is stepped (DAP ``next``) line by line to its next all_reduce, and the step over that all_reduce is timed at
the client, request to ``stopped``. ``ranks``: all-stop on: the others are paused (in their Python) while rank
1 steps, and its step into the all_reduce lets them go (``AllStop._let_go``), so the time holds their resume
and the rest of their step's Python. ``ranks-one-client``: the same with a client on rank 1 only (the others held by the
ranks with no client, woken by their FIFO). ``off``: all-stop off: the others ran on and wait in the all_reduce. Before
step-all, the ``ranks`` step never returned (the others were held).

Idle cost: one 2-rank job, no client; rank 0 times blocks of steps (1 KiB all_reduce + ~0.3 ms of Python)
with all-stop armed (the byte read in the collective wrapper, and a thread doing what the watcher does while
a client is attached: a 20 ms sleep and a read of the board) and disarmed, in ABBA order; steps/s armed over
disarmed, median of pairs with a 95 % bootstrap interval.

Result: bench/results/2026-12-07-allstop-default.md (all-stop on by default), bench/results/2026-12-07-allstop.md,
bench/results/2026-12-07-step-all.md (the step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.suite.common import PY, ROOT, WORK, base_env, free_range, log, median_ci

BLOCK = 100


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def job(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    flag = torch.zeros(256)
    if a.job == "step":
        while not Path(a.ctl, "done").exists():
            _busy(a.busy)
            dist.all_reduce(flag)  # BREAKPOINT: step over
            if rank == 1:
                hit = 1  # BREAKPOINT: step bench
                del hit
        dist.destroy_process_group()
        return
    if a.job == "latency":
        while not Path(a.ctl, "done").exists():
            _busy(a.busy)
            dist.all_reduce(flag)
            if rank == 1:
                hit = 1  # BREAKPOINT: allstop bench
                del hit
        dist.destroy_process_group()
        return
    from rtdebug.rank import allstop, runtime
    from rtdebug.rank.collectives import recorder

    part = runtime.allstop
    assert part is not None, "all-stop is not armed in this rank"
    watching = threading.Event()

    def watcher_like() -> None:  # the watcher's idle loop (rtdebug.rank.allstop.AllStop._watch)
        seen = part.board.gen()
        while True:
            watching.wait()
            time.sleep(allstop.POLL_S)
            if part.board.gen() != seen:
                seen = part.board.gen()

    threading.Thread(target=watcher_like, daemon=True).start()

    def step() -> None:
        _busy(0.0003)
        dist.all_reduce(flag)

    for _ in range(200):
        step()
    blocks = []
    for b in range(2 * a.pairs):
        on = (b % 4) in (0, 3)  # ABBA
        if on:
            recorder.hold_with(part.board.mm, allstop.MODE, part.hold)
            watching.set()
        else:
            recorder.hold_with(None, 0, None)
            watching.clear()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(BLOCK):
            step()
        blocks.append([on, time.perf_counter() - t0])
    if rank == 0:
        Path(a.ctl, "blocks.json").write_text(json.dumps(blocks))
    dist.destroy_process_group()


def _start(
    tmp: str, n: int, kind: str, env: dict[str, str], busy: float = 0.0, pairs: int = 0
) -> tuple[subprocess.Popen, int]:
    env = dict(base_env(Path(tmp) / "registry"), PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", **env)
    base = free_range(n)
    cmd = [PY, "-m", "rtdebug", "torchrun", "--debug-port-base", str(base), "--nproc-per-node", str(n),
           "--master-addr", "127.0.0.1", "--master-port", str(free_range(1)), __file__, "--job", kind,
           "--ctl", tmp, "--busy", str(busy), "--pairs", str(pairs)]  # fmt: skip
    out = open(Path(tmp, "job.log"), "wb")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT), base


def _main_thread(c) -> int:
    threads = c.request("threads")["threads"]
    return next((t["id"] for t in threads if t["name"] == "MainThread"), threads[0]["id"])


def latency(n: int, mode: str, trials: int, busy: float) -> list[float]:
    from support.dap import DAPClient, DAPError
    from support.paths import marker_line

    line = marker_line(Path(__file__), "allstop bench")
    with tempfile.TemporaryDirectory(prefix="allstop-", dir=WORK) as tmp:
        proc, base = _start(tmp, n, "latency", {"RTDEBUG_ALL_STOP": "1" if mode == "ranks" else "0"}, busy)
        try:
            clients = [DAPClient("127.0.0.1", base + r, timeout=120) for r in range(n)]
            for c in clients:
                c.attach()
            others = [c for r, c in enumerate(clients) if r != 1]
            mains = {id(c): _main_thread(c) for c in others}
            out = []
            for _ in range(trials):
                clients[1].request("setBreakpoints", source={"path": __file__}, breakpoints=[{"line": line}])
                s1 = clients[1].wait_stopped(120)
                t0 = time.perf_counter()
                if mode == "client":
                    for c in others:  # as the extension: the main thread's id, then pause
                        c.send("pause", threadId=_main_thread(c))
                try:
                    stops = [c.wait_stopped(20) for c in others]
                    out.append(time.perf_counter() - t0)
                except DAPError:  # a rank the pause reached only in C++ (its collective): paused after rank 1 goes
                    stops = []
                    out.append(float("inf"))
                clients[1].request("setBreakpoints", source={"path": __file__}, breakpoints=[])
                clients[1].continue_(s1["threadId"])
                if not stops and mode == "client":
                    stops = [c.wait_stopped(60) for c in others]
                if mode == "client":
                    for c, s in zip(others, stops, strict=True):
                        c.continue_(s.get("threadId") or mains[id(c)])
                for c in others:
                    c.event("continued", 60)
            Path(tmp, "done").write_text("")
            for c in clients:
                c.disconnect()
            proc.wait(120)
        finally:
            proc.kill()
            proc.wait()
            Path(WORK, f"allstop-{n}-{mode}.log").write_bytes(Path(tmp, "job.log").read_bytes())
    return out


def step_over(n: int, mode: str, trials: int, busy: float) -> list[float]:
    """Seconds from rank 1's ``next`` over its all_reduce to its ``stopped`` event, per trial."""
    from support.dap import DAPClient
    from support.paths import marker_line

    stop, over = marker_line(Path(__file__), "step bench"), marker_line(Path(__file__), "step over")
    with tempfile.TemporaryDirectory(prefix="allstop-step-", dir=WORK) as tmp:
        proc, base = _start(tmp, n, "step", {"RTDEBUG_ALL_STOP": "0" if mode == "off" else "1"}, busy)
        try:
            attached = [1] if mode == "ranks-one-client" else range(n)
            clients = {r: DAPClient("127.0.0.1", base + r, timeout=120) for r in attached}
            for c in clients.values():
                c.attach()
            c1, out = clients[1], []
            for _ in range(trials):
                c1.request("setBreakpoints", source={"path": __file__}, breakpoints=[{"line": stop}])
                thread = c1.stopped_for("breakpoint", 120)["threadId"]
                c1.request("setBreakpoints", source={"path": __file__}, breakpoints=[])
                while c1.top_frame(thread)["line"] != over:  # to the all_reduce, a line at a time
                    c1.request("next", threadId=thread)
                    c1.stopped_for("step", 60)
                t0 = time.perf_counter()
                c1.request("next", threadId=thread)
                c1.stopped_for("step", 120)
                out.append(time.perf_counter() - t0)
                c1.continue_(thread)
            Path(tmp, "done").write_text("")
            for c in clients.values():
                c.disconnect()
            proc.wait(120)
        finally:
            proc.kill()
            proc.wait()
            Path(WORK, f"allstop-step-{n}-{mode}.log").write_bytes(Path(tmp, "job.log").read_bytes())
    return out


def idle(pairs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="allstop-idle-", dir=WORK) as tmp:
        proc, _ = _start(tmp, 2, "idle", {"RTDEBUG_ALL_STOP": "1"}, pairs=pairs)
        try:
            proc.wait(600)
            blocks = json.loads(Path(tmp, "blocks.json").read_text())
        finally:
            proc.kill()
            proc.wait()
    ratios = []
    for i in range(0, len(blocks), 2):
        (on_a, t_a), (_, t_b) = blocks[i], blocks[i + 1]
        t_on, t_off = (t_a, t_b) if on_a else (t_b, t_a)
        ratios.append(t_off / t_on)
    rates = {o: statistics.median(BLOCK / t for x, t in blocks if x == o) for o in (True, False)}
    return {"ratio": statistics.median(ratios), "ci": median_ci(ratios), "n": len(ratios),
            "armed_steps_s": rates[True], "disarmed_steps_s": rates[False]}  # fmt: skip


def bound(seconds: float = 5.0) -> dict:
    """The two things all-stop adds to a running job, each timed alone: the wrapper's byte read per collective
    (as a lambda: an upper bound) and the CPU the watcher's loop takes per second of wall time."""
    import timeit

    from rtdebug.rank import allstop

    with tempfile.TemporaryDirectory(prefix="allstop-bound-", dir=WORK) as tmp:
        board = allstop.Board(Path(tmp, allstop.FILE))
        hold = [board.mm, allstop.MODE]
        check = min(timeit.repeat(lambda: hold[0] is not None and hold[0][hold[1]], number=200000, repeat=5))
        cpu: list[float] = []

        def loop() -> None:  # AllStop._watch while nothing changes
            t0, seen, end = time.thread_time(), board.gen(), time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(allstop.POLL_S)
                if board.gen() != seen:
                    seen = board.gen()
            cpu.append(time.thread_time() - t0)

        t = threading.Thread(target=loop)
        t.start()
        t.join()
        board.mm.close()
    return {"check_ns": check / 200000 * 1e9, "watcher_cpu_per_s": cpu[0] / seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=("latency", "step", "idle"), help="(the ranks' program)")
    p.add_argument("--ctl", help="(the ranks' directory)")
    p.add_argument("--ranks", default="2,4", help="job sizes for the latency, comma-separated")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--busy", type=float, default=0.25, help="seconds of pure Python per step (latency job)")
    p.add_argument("--pairs", type=int, default=30, help="ABBA pairs of the in-job idle A/B (0: none)")
    p.add_argument("--step-busy", type=float, default=0.05, help="seconds of pure Python per step (step job)")
    p.add_argument("--what", default="latency,step,idle", help="which parts: latency, step, idle (comma-separated)")
    p.add_argument("--out", default=str(WORK / "allstop_bench.json"))
    a = p.parse_args()
    if a.job:
        job(a)
        return 0
    WORK.mkdir(exist_ok=True)
    res: dict = {"latency": {}, "step": {}, "load_before": os.getloadavg()[0]}
    what = set(a.what.split(","))
    for n in (int(x) for x in a.ranks.split(",") if x and "step" in what):
        for mode in ("ranks", "ranks-one-client", "off"):
            xs = step_over(n, mode, a.trials, a.step_busy)
            res["step"][f"{n}/{mode}"] = xs
            log(f"{n} ranks, {mode}: step over all_reduce median {statistics.median(xs) * 1e3:.1f} ms "
                f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}, n={len(xs)})")  # fmt: skip
    for n in (int(x) for x in a.ranks.split(",") if x and "latency" in what):
        for mode in ("ranks", "client"):  # the same job size, one after the other
            xs = latency(n, mode, a.trials, a.busy)
            res["latency"][f"{n}/{mode}"] = xs
            log(f"{n} ranks, {mode}: stop -> others paused median {statistics.median(xs) * 1e3:.1f} ms "
                f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}, n={len(xs)}; inf: only in C++)")  # fmt: skip
    if "idle" not in what:
        a.pairs = 0
    else:
        res["bound"] = b = bound()
        log(f"bound: byte read {b['check_ns']:.0f} ns per collective;"
            f" watcher {b['watcher_cpu_per_s'] * 1e3:.2f} ms CPU/s")  # fmt: skip
    if a.pairs:
        res["idle"] = r = idle(a.pairs)
        log(f"idle: armed/disarmed steps/s {r['ratio']:.4f} CI {r['ci']} (n={r['n']})")
    res["load_after"] = os.getloadavg()[0]
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
