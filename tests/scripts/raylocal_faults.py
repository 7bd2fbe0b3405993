"""Ray Train local mode under rtdebug, fed bad input and faults: ``raylocal_faults.py MODE STORAGE [NAME]``.

Modes: ``ok`` (3 checkpoints), ``dirnames`` (each rank names its own checkpoint_dir_name), ``vanish``
(rank 1's checkpoint directory is gone before report()), ``callback`` (a callback raises), ``skip``
(rank 1 skips report #3), ``fail-once`` (FailureConfig(max_failures=1): the first attempt fails after two
checkpoints; the restart resumes), ``big`` (a 1 MiB checkpoint file), ``async`` (checkpoint_upload_mode=ASYNC,
delete_local_checkpoint_after_upload), ``upload-fn`` (checkpoint_upload_fn).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import ray.train
import ray.train.collective
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.train.v2.api.callback import UserCallback
from ray.train.v2.api.report_config import CheckpointUploadMode

MODE, STORAGE = sys.argv[1], sys.argv[2]
NAME = sys.argv[3] if len(sys.argv) > 3 else "faults"


class Boom(UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        raise ValueError("boom in the callback")


class Seen(UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        print(f"callback after_report ranks={[m['rank'] for m in metrics]}", flush=True)

    def after_exception(self, run_context, worker_exceptions):
        print(f"callback after_exception {sorted(worker_exceptions)}: {list(worker_exceptions.values())}", flush=True)


def upload(checkpoint, dir_name):
    dest = os.path.join(ray.train.get_context().get_storage().experiment_fs_path, dir_name)
    os.makedirs(dest, exist_ok=True)
    for f in os.listdir(checkpoint.path):
        shutil.copy(os.path.join(checkpoint.path, f), dest)
    return Checkpoint.from_directory(dest)


def train_fn():
    rank = ray.train.get_context().get_world_rank()
    start = ray.train.get_checkpoint()
    first = int(open(os.path.join(start.path, f"rank{rank}.txt")).read()) + 1 if start else 0
    print(f"rank {rank} starts at step {first}", flush=True)
    for step in range(first, 3):
        if MODE == "skip" and rank == 1 and step == 2:
            print("rank 1 skips report #3", flush=True)
            break
        d = tempfile.mkdtemp()
        with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
            f.write(str(step))
        if MODE == "big":
            with open(os.path.join(d, "weights.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
        kw = {}
        if MODE == "dirnames":
            kw["checkpoint_dir_name"] = f"ckpt-rank{rank}"
        if MODE == "vanish" and rank == 1:
            shutil.rmtree(d)
        if MODE == "async":
            kw.update(checkpoint_upload_mode=CheckpointUploadMode.ASYNC, delete_local_checkpoint_after_upload=True)
        if MODE == "upload-fn":
            kw["checkpoint_upload_fn"] = upload
        ray.train.report({"rank": rank, "step": step}, checkpoint=Checkpoint.from_directory(d), **kw)
        if MODE == "async":
            print(f"rank {rank} local copy after async report: {os.path.exists(d)}", flush=True)
        if MODE == "fail-once" and step == 1 and start is None:
            raise RuntimeError(f"rank {rank} fails once")
    print(f"rank {rank} history {len(ray.train.get_all_reported_checkpoints())}", flush=True)


callbacks = [Boom()] if MODE == "callback" else [Seen()]
result = TorchTrainer(
    train_fn,
    scaling_config=ScalingConfig(num_workers=0),
    run_config=RunConfig(
        storage_path=STORAGE,
        name=NAME,
        callbacks=callbacks,
        checkpoint_config=CheckpointConfig(num_to_keep=2),
        failure_config=FailureConfig(max_failures=1 if MODE == "fail-once" else 0),
    ),
).fit()
print(
    f"result checkpoint {os.path.basename(result.checkpoint.path)} files {sorted(os.listdir(result.checkpoint.path))}"
)
