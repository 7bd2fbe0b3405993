"""Ray Data under torchrun: the start-up cost per rank of ``rtdebug.rank.raylocal.data`` (one Ray instance
the ranks share), against the alternative (one Ray instance per rank, each reading the whole dataset), and
the memory of a dataset many times the object store.

Each case is a real ``python -m torch.distributed.run --nproc-per-node N`` job of this file (``--rank``);
every rank times its own phases and writes them to a JSON file:

- ``ray1``: one rank, Ray's own local mode as it is: ``ray.data.range`` auto-starts Ray; the baseline;
- ``shared``: the script's ``ray.data.range`` auto-starts Ray in every rank (as the same script does
  under Ray's local mode), then ``shard_datasets`` (rank 0's instance becomes the job's, the others
  leave theirs and join it); then each rank reads its share;
- ``shared_lazy``: the datasets are callables, nothing runs yet: rank 0 starts a head, the others join;
- ``per_rank``: each rank keeps its own instance and reads the whole dataset, keeping every n-th batch.

Phases: ``own`` (the script's dataset line, Ray's auto-start included), ``shard`` (``shard_datasets``),
``first`` (to the first batch of the share), ``epoch`` (the rest of one epoch). A dataset of
``--rows`` rows through a ``map_batches`` that does ``--work`` µs of work per row.

``--memory``: 2 ranks; rank 0 starts Ray with ``object_store_memory`` = ``--store-mb`` (as a user caps it),
both stream ``ray.data.range_tensor`` rows of 64 KiB (``--mem-gb`` in all) through a map, two epochs; the
parent samples the machine's used memory (psutil) every 0.2 s and reports the peak over the baseline.

    .venv/bin/python bench/raydata_startup.py [--rounds 3] [--ranks 2 3] [--memory]
    # writes bench/results/DATE-raydata-startup.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("ray1", "shared", "shared_lazy", "per_rank")


# ---- inside a rank ---------------------------------------------------------------------------------------


class _Exchange:
    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.group = dist.new_group(backend="gloo")

    def broadcast(self, obj, src=0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)


def _dataset(rows: int, work_us: float):
    import ray.data

    def work(batch):
        end = time.perf_counter() + work_us * 1e-6 * len(batch["id"])
        while time.perf_counter() < end:
            pass
        return batch

    return ray.data.range(rows).map_batches(work)


def _rank_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from rtdebug.rank.raylocal import data

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    ex = _Exchange() if world > 1 else None
    t: dict[str, float] = {}
    if ex:
        ex.barrier()  # every rank starts its clock together
    t0 = time.perf_counter()
    if args.mode == "shared_lazy":
        datasets = {"train": lambda: _dataset(args.rows, args.work)}
    else:
        import ray

        datasets = {"train": _dataset(args.rows, args.work)}
        if args.mode in ("ray1", "per_rank"):
            ray.init(ignore_reinit_error=True)  # what the first execution does: timed as "own"
        else:
            ray.data.DataContext.get_current()  # nothing: ray.data.range already auto-started Ray
    t["own"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    if args.mode in ("shared", "shared_lazy"):
        shards = data.shard_datasets(datasets, None, world, rank, ex)
        it, keep = shards["train"], lambda i: True
    else:
        it = datasets["train"].iterator()
        keep = (lambda i: i % world == rank) if args.mode == "per_rank" else (lambda i: True)
    t["shard"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    rows = 0
    first = None
    for i, b in enumerate(it.iter_batches(batch_size=256)):
        if keep(i):
            rows += len(b["id"])
            if first is None:
                first = time.perf_counter() - t2
    t["first"] = first or 0.0
    t["epoch"] = time.perf_counter() - t2 - t["first"]
    t["rows"] = rows
    with open(os.path.join(args.out, f"{args.mode}-{world}-rank{rank}.json"), "w") as f:
        json.dump(t, f)
    if args.mode in ("shared", "shared_lazy"):
        data.close()
    if world > 1:
        dist.destroy_process_group()


def _memory_rank(args: argparse.Namespace) -> None:
    import numpy as np
    import ray
    import ray.data
    import torch.distributed as dist

    from rtdebug.rank.raylocal import data

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ex = _Exchange()
    if rank == 0:  # as a user caps the object store: the instance the job's ranks then share
        ray.init(object_store_memory=args.store_mb << 20, include_dashboard=False)
    rows = (args.mem_gb[0] << 30) // (64 << 10)

    def double(batch):
        return {"data": batch["data"] * np.int64(2)}

    ds = lambda: ray.data.range_tensor(rows, shape=(8192,)).map_batches(double)  # noqa: E731  64 KiB rows
    it = data.shard_datasets({"train": ds}, None, world, rank, ex)["train"]
    got = 0
    for _ in range(2):
        for b in it.iter_batches(batch_size=64):
            got += b["data"].nbytes
    with open(os.path.join(args.out, f"memory-rank{rank}.json"), "w") as f:
        json.dump({"bytes": got, "rows": rows}, f)
    data.close()
    dist.destroy_process_group()


# ---- the parent -----------------------------------------------------------------------------------------


def _torchrun(n: int, extra: list[str], out: str) -> float:
    """Run the job; the CPU seconds its processes used (those reaped in its tree, Ray's included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n)]
    cmd += [str(Path(__file__).resolve()), "--rank", "--out", out, *extra]
    r = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"bench job failed ({' '.join(extra)}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _timings(args: argparse.Namespace) -> dict:
    results: dict[str, list[dict]] = {}
    for rnd in range(args.rounds):
        for n in [1, *args.ranks]:
            for mode in MODES:
                if (mode == "ray1") != (n == 1):
                    continue
                with tempfile.TemporaryDirectory(prefix="rdbench-") as out:
                    cpu = _torchrun(n, ["--mode", mode, "--rows", str(args.rows), "--work", str(args.work)], out)
                    results.setdefault(f"{mode}/{n}/job", []).append({"cpu": cpu})
                    for r in range(n):
                        t = json.loads(Path(out, f"{mode}-{n}-rank{r}.json").read_text())
                        results.setdefault(f"{mode}/{n}/{'0' if r == 0 else 'k'}", []).append(t)
                print(f"round {rnd + 1}: {mode} on {n} rank(s) done", file=sys.stderr, flush=True)
    return results


def _memory(args: argparse.Namespace, gb: int) -> dict:
    """One memory run: the peak PSS of the job's process tree (shared pages counted once in all), and the
    peak of the machine's used memory over its baseline (other load on the machine is in that one)."""
    import psutil

    peak = {"pss": 0, "used": 0}
    base = psutil.virtual_memory().used
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(Path(__file__).resolve()), "--rank", "--memory", "--store-mb", str(args.store_mb)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rdbench-") as out:
        log = open(Path(out, "log"), "w")
        job = subprocess.Popen([*cmd, "--mem-gb", str(gb), "--out", out], cwd=out, stdout=log, stderr=log)
        while job.poll() is None:
            pss = 0
            try:
                procs = [psutil.Process(job.pid), *psutil.Process(job.pid).children(recursive=True)]
            except psutil.Error:
                procs = []
            for pr in procs:
                try:
                    pss += pr.memory_full_info().pss
                except psutil.Error:
                    pass
            peak["pss"] = max(peak["pss"], pss)
            peak["used"] = max(peak["used"], psutil.virtual_memory().used - base)
            time.sleep(0.5)
        log.close()
        if job.returncode != 0:
            raise SystemExit(f"memory job failed:\n{Path(out, 'log').read_text()[-3000:]}")
        got = [json.loads(Path(out, f"memory-rank{r}.json").read_text()) for r in (0, 1)]
    return {
        "seconds": time.perf_counter() - t0,
        "peak_pss_mb": peak["pss"] / 2**20,
        "peak_used_over_baseline_mb": peak["used"] / 2**20,
        "streamed_gb": sum(g["bytes"] for g in got) / 2**30,
        "dataset_gb": gb,
        "store_mb": args.store_mb,
    }


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}–{max(xs):.2f}]"


def _report(args: argparse.Namespace, res: dict, mem: list[dict] | None) -> str:
    import ray
    import torch

    now = time.gmtime()
    mem_flags = f" --memory --mem-gb {' '.join(map(str, args.mem_gb))}" if mem else ""
    lines = [
        "# Ray Data under torchrun: start-up cost per rank",
        "",
        f"`bench/raydata_startup.py --rounds {args.rounds} --ranks {' '.join(map(str, args.ranks))} --rows "
        f"{args.rows} --work {args.work}{mem_flags}`, {time.strftime('%Y-%m-%d %H:%M UTC', now)}; "
        f"{os.cpu_count()} CPUs shared with other work (load average {os.getloadavg()[0]:.1f} at the end), "
        f"Python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}.",
        "",
        "Seconds per rank, median [min–max] over the rounds; rank 0 and the other ranks (`k`) apart. "
        "`own`: the script's dataset line (Ray's auto-start in that rank); `shard`: `shard_datasets` "
        "(rank 0: configure + pickle + broadcast; others: leave their own instance, join rank 0's, unpickle); "
        "`first`: to the share's first batch; `epoch`: the rest of one epoch; rows: the rank's share.",
        "",
        "| case | ranks | rank | own | shard | first | epoch | own+shard+first | rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    jobs = [k for k in res if k.endswith("/job")]
    for key in sorted(
        (k for k in res if k not in jobs), key=lambda k: (int(k.split("/")[1]), MODES.index(k.split("/")[0]), k)
    ):
        mode, n, who = key.split("/")
        ts = res[key]
        total = [t["own"] + t["shard"] + t["first"] for t in ts]
        cells = [_med([t[p] for t in ts]) for p in ("own", "shard", "first", "epoch")]
        lines.append(f"| {mode} | {n} | {who} | {' | '.join(cells)} | {_med(total)} | {int(ts[0]['rows'])} |")
    lines += [
        "",
        "CPU seconds of each whole job (every process of it that was reaped: torchrun, the ranks, Ray's), "
        "which other load on the machine inflates much less than the wall times above:",
        "",
        "| case | ranks | job CPU s |",
        "|---|---|---|",
    ]
    for key in sorted(jobs, key=lambda k: (int(k.split("/")[1]), MODES.index(k.split("/")[0]))):
        mode, n, _ = key.split("/")
        lines.append(f"| {mode} | {n} | {_med([t['cpu'] for t in res[key]])} |")
    if mem:
        lines += [
            "",
            f"Memory: 2 ranks, the object store capped at {args.store_mb} MiB (rank 0's `ray.init`, the instance "
            "the ranks share), two epochs of a `range_tensor` dataset of 64 KiB rows through a map; sampled every "
            "0.5 s: the job's process tree (torchrun, ranks, every Ray process) in PSS, and the machine's used "
            "memory over its baseline (other work on the machine included):",
            "",
            "| dataset | streamed (both ranks, 2 epochs) | peak PSS of the job | peak machine used over baseline | s |",
            "|---|---|---|---|---|",
        ]
        for m in mem:
            lines.append(
                f"| {m['dataset_gb']} GiB | {m['streamed_gb']:.1f} GiB | {m['peak_pss_mb']:.0f} MiB | "
                f"{m['peak_used_over_baseline_mb']:.0f} MiB | {m['seconds']:.0f} |"
            )
    lines += ["", "Raw:", "", "```", json.dumps({"timings": res, "memory": mem}), "```", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranks", type=int, nargs="+", default=[2])
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--work", type=float, default=50.0, help="µs of work per row in the map")
    p.add_argument("--memory", action="store_true", help="also the memory run")
    p.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store-mb", type=int, default=256)
    p.add_argument("--mem-gb", type=int, nargs="+", default=[1, 4], help="dataset sizes of the memory runs")
    p.add_argument(
        "--result", default=str(ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-raydata-startup.md")
    )
    args = p.parse_args()
    if args.rank:
        (_memory_rank if args.memory else _rank_main)(args)
        return
    res = {} if args.memory_only else _timings(args)
    mem = [_memory(args, gb) for gb in args.mem_gb] if args.memory or args.memory_only else None
    text = _report(args, res, mem)
    Path(args.result).parent.mkdir(parents=True, exist_ok=True)
    Path(args.result).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
