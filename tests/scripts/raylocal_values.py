"""Every value where local mode with the cluster's semantics differs from Ray's own local mode, read by a
script the way a user's would: ``raylocal_values.py STORAGE``, under ``rtdebug torchrun --nproc-per-node 2``
(or ``rtdebug run``: one rank).

Three ``fit()`` calls with one ``RunConfig(name)`` (under torchrun each makes the process group again):

1. the broadcast sends each rank's own value; rank 0 alone passes a checkpoint to report 1 of 2
   (``get_checkpoint()`` after it), report 2 has none (``get_checkpoint()`` twice after it),
   ``get_all_reported_checkpoints()``, then the ``Result``;
2. the same name again: it resumes, so ``get_checkpoint()`` at the start is run 1's checkpoint; every rank
   passes a checkpoint to its one report, with metrics of its own;
3. the train function raises ``ValueError``; the script catches what ``fit()`` raises.

Each rank prints ``rank R: <what it read>`` lines on stdout; the test reads them and the ``rtdebug:`` lines.
"""

from __future__ import annotations

import os
import sys
import tempfile

import ray.train
import ray.train.collective
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

STORAGE = sys.argv[1]


def say(text: str) -> None:
    print(f"rank {ray.train.get_context().get_world_rank()}: {text}", flush=True)


def first_run() -> None:
    rank = ray.train.get_context().get_world_rank()
    say(f"broadcast {ray.train.collective.broadcast_from_rank_zero({'seed': 1000 + rank})}")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model.txt"), "w") as f:
            f.write("weights")
        ray.train.report({"loss": 1.0, "rank": rank}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
    found = ray.train.get_checkpoint()
    say(f"after report 1 get_checkpoint {os.path.basename(found.path) if found else None}")
    ray.train.report({"loss": 0.5, "rank": rank})
    for _ in range(2):  # said once per run, not per call
        found = ray.train.get_checkpoint()
        say(f"get_checkpoint {os.path.basename(found.path) if found else None}")
    say(f"reported {len(ray.train.get_all_reported_checkpoints())}")


def second_run() -> None:
    rank = ray.train.get_context().get_world_rank()
    found = ray.train.get_checkpoint()
    say(f"resumed from {os.path.basename(found.path) if found else None}")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
            f.write("weights")
        ray.train.report({"loss": 0.25, "rank": rank}, checkpoint=Checkpoint.from_directory(d))


def failing_run() -> None:
    raise ValueError("the train function's own error")


def fit(train_fn):
    return TorchTrainer(
        train_fn,
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(storage_path=STORAGE, name="values"),
    ).fit()


def main() -> None:
    rank = int(os.environ.get("RANK", "0"))
    result = fit(first_run)
    print(f"rank {rank}: result metrics {result.metrics}", flush=True)
    print(f"rank {rank}: result checkpoint {os.path.basename(result.checkpoint.path) if result.checkpoint else None}")
    result = fit(second_run)
    print(f"rank {rank}: second result metrics {result.metrics}", flush=True)
    try:
        fit(failing_run)
    except ValueError:
        print(f"rank {rank}: caught the ValueError", flush=True)
    except Exception as exc:
        print(f"rank {rank}: caught {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    main()
