"""The training job ``bench/probes/ray_bench.py`` runs: a 2-worker TorchTrainer that steps only on its turn.

Three of these jobs stay up on one Ray cluster (two plain, one under ``rtdebug run``).
The bench hands out turns through one file, ``CTL/turn`` (``seq start end label:core
label:core``): the two jobs it names train from ``start`` to ``end`` (wall clock), each
pinned whole (every thread, Ray's too) to its own core, while the third sleeps. So the
two sides of a ratio run at the same moments under the same other load, and swapping
cores in the next turn cancels a faster core. After each window every worker writes
``CTL/res-<label>-<seq>-<rank>`` = ``steps cpu_s best own_s n_own``: CPU of the whole
process, steps/s in the window's fastest 0.5 s, CPU of rtdebug's own threads and how
many. ``stop`` in the turn file ends the loop; with ``--hold`` the job then keeps
stepping at the ``BENCH-HOLD`` line until ``CTL/hold`` exists, for attach-all.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

BUCKET_S = 0.5


def _pin(core: int) -> None:
    """Pin every thread of this process to ``core`` (threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # a thread that just ended
            pass


def rtdebug_cpu() -> tuple[float, int]:
    """CPU seconds used so far by this process's rtdebug threads (all named ``rtdebug-*``), and how many."""
    import threading

    total, n = 0, 0
    for t in threading.enumerate():
        if t.name.startswith("rtdebug") and t.native_id is not None:
            try:
                total += int(Path(f"/proc/self/task/{t.native_id}/schedstat").read_text().split()[0])
                n += 1
            except (OSError, ValueError, IndexError):  # a thread that just ended
                pass
    return total / 1e9, n


def train_fn(config):
    import ray.train
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = ray.train.get_context().get_world_rank()
    label, ctl = config["label"], Path(config["ctl"])
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 1)

    def step(end: float) -> bool:
        """One training step with one collective; True when any rank is past ``end`` (all leave together)."""
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        flag = torch.tensor([1.0 if time.time() > end else 0.0])
        dist.all_reduce(flag)  # BENCH-STEP
        opt.step()
        return flag.item() > 0

    warm_end = time.time() + 3
    while not step(warm_end):
        pass
    (ctl / f"ready-{label}-{rank}").write_text("")
    seen = 0
    while True:
        try:
            turn = (ctl / "turn").read_text().split()
        except OSError:
            turn = []
        if turn == ["stop"]:
            break
        if len(turn) < 4 or int(turn[0]) <= seen:
            time.sleep(0.05)
            continue
        seen, start, end = int(turn[0]), float(turn[1]), float(turn[2])
        cores = dict(t.split(":") for t in turn[3:])
        if label not in cores:
            continue
        _pin(int(cores[label]))
        steps, cpu0, own0, buckets = 0, None, 0.0, [0] * (int((end - start) / BUCKET_S) + 1)
        while not step(end):
            now = time.time()
            if now >= start:
                if cpu0 is None:
                    cpu0, own0 = time.process_time(), rtdebug_cpu()[0]
                steps += 1
                buckets[min(int((now - start) / BUCKET_S), len(buckets) - 1)] += 1
        cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
        own, n_own = rtdebug_cpu()
        own = own - own0 if cpu0 is not None else 0.0
        best = max(buckets[:-1] or buckets) / BUCKET_S  # the fastest whole bucket: the speed when nothing preempts
        (ctl / f"res-{label}-{seen}-{rank}").write_text(f"{steps} {cpu:.5f} {best:.1f} {own:.6f} {n_own}")
    while config["hold"]:  # attach-all: keep stepping here; both ranks leave in the same step
        flag = torch.tensor([1.0 if (ctl / "hold").exists() else 0.0])
        dist.all_reduce(flag)  # BENCH-HOLD
        if flag.item() > 0:
            break
        time.sleep(0.01)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", required=True)
    p.add_argument("--ctl", required=True, help="the bench's control directory")
    p.add_argument("--hold", action="store_true", help="after stop, step at BENCH-HOLD until CTL/hold exists")
    p.add_argument("--storage", default="/tmp/rtdebug-ray-bench")
    args = p.parse_args()

    import ray
    import ray.train
    import ray.train.torch
    from ray.train import ScalingConfig

    ray.init()
    trainer = ray.train.torch.TorchTrainer(
        train_fn,
        train_loop_config={"label": args.label, "ctl": args.ctl, "hold": args.hold},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25}),
        run_config=ray.train.RunConfig(storage_path=args.storage, name=f"bench-{args.label}-{os.getpid()}"),
    )
    trainer.fit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
