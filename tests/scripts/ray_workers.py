"""A 2-worker TorchTrainer on CPU (gloo) for a Ray cluster: rtdebug run gives every worker an endpoint.

Options: --workers N, --steps N, --step-sleep S, --slot R (each worker needs 1 of custom resource R, so
workers spread over nodes that have one each), --fail-rank N (that rank raises), --bp-rank N (that rank
calls rtdebug.breakpoint(rank=N, timeout=...)), --start-ray DIR (the script's own ray.init() starts a
one-node cluster in temp dir DIR, as a user's script does when no cluster exists).
"""

import argparse
import os
import time

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.train import ScalingConfig

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=2)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--slot", default=None)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--bp-rank", type=int, default=-1)
p.add_argument("--bp-timeout", type=float, default=0.0)
p.add_argument("--until-file", default=None, help="after --steps, keep stepping until this file exists")
p.add_argument("--gate-file", default=None, help="start stepping only once this file exists")
p.add_argument("--fail-once", default=None, help="rank 1 raises at step 1 unless this file exists (creates it)")
p.add_argument("--start-ray", metavar="DIR", default=None, help="ray.init() starts a local cluster in DIR")
p.add_argument("--max-failures", type=int, default=0, help="FailureConfig(max_failures): group restarts")
p.add_argument("--optimizer", action="store_true", help="each step also takes an SGD step (for --stop-on step=N)")
args = p.parse_args()


def train_fn(config):
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    total = torch.zeros(1)
    while config["gate"] and not os.path.exists(config["gate"]):
        time.sleep(0.1)
    step = 0
    weight = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([weight], lr=0.1) if config.get("optimizer") else None
    while True:
        done = step >= config["steps"] and not (config["until"] and not os.path.exists(config["until"]))
        flag = torch.tensor([1.0 if done else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank leaves the loop at the same step
        if flag.item() > 0:
            break
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        total += t  # BREAKPOINT: step
        if opt is not None:
            (weight * t).sum().backward()
            opt.step()  # OPTIMIZER STEP
            opt.zero_grad()
        print(f"worker rank {rank} step {step} pid {os.getpid()}", flush=True)
        time.sleep(config["step_sleep"])
        if rank == 1 and step == 1 and config["fail_once"] and not os.path.exists(config["fail_once"]):
            open(config["fail_once"], "w").close()
            raise RuntimeError("rank 1 fails once on purpose")
        if rank == config["fail_rank"]:
            raise RuntimeError(f"rank {rank} failed on purpose")
        if rank == config["bp_rank"] and step == 0:
            import rtdebug

            stopped = rtdebug.breakpoint(rank=config["bp_rank"], timeout=config["bp_timeout"])
            print(f"worker rank {rank} rtdebug.breakpoint returned {stopped}", flush=True)
        step += 1
    ray.train.report({"rank": rank, "total": float(total.item())})


if args.start_ray:  # what a user's script does on a laptop: ray.init() starts the cluster itself
    ray.init(_temp_dir=args.start_ray, num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024)
else:
    ray.init()  # RAY_ADDRESS (rtdebug run --ray-address) names the cluster
resources = {"CPU": 0.5, args.slot: 1} if args.slot else {"CPU": 0.5}
trainer = ray.train.torch.TorchTrainer(
    train_fn,
    train_loop_config={
        "steps": args.steps,
        "step_sleep": args.step_sleep,
        "fail_rank": args.fail_rank,
        "bp_rank": args.bp_rank,
        "bp_timeout": args.bp_timeout,
        "until": args.until_file,
        "gate": args.gate_file,
        "fail_once": args.fail_once,
        "optimizer": args.optimizer,
    },
    scaling_config=ScalingConfig(num_workers=args.workers, resources_per_worker=resources),
    run_config=ray.train.RunConfig(
        storage_path=os.environ.get("RTDEBUG_TEST_STORAGE", "/tmp/rtdebug-ray-results"),
        failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
    ),
)
result = trainer.fit()
print(f"ray run finished: error={result.error}", flush=True)
