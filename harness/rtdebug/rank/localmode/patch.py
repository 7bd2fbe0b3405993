"""The seam: the V2 trainer's local controller, replaced when (if ever) the job imports the trainer."""

from __future__ import annotations

from typing import Any

TRAINER_MODULE = "ray.train.v2.api.data_parallel_trainer"


def install() -> None:
    """Replace the V2 trainer's local controller when (if ever) the job imports it."""
    from rtdebug.common.imports import when_imported
    from rtdebug.rank.localmode import notes

    notes.keep_stderr()  # before the script (or a test runner) redirects it: the lines where Ray's value differs
    when_imported(TRAINER_MODULE, _patch)


# Every piece of Ray Train the local controller of ours is built on (Ray 2.60), internal ones included, probed
# before it replaces anything: a Ray without one of them keeps its own local mode, said at the start, rather
# than failing in the middle of a run (tests/unit/test_raylocal_units.py keeps this list equal to the imports).
NEEDED = {
    "ray.train.v2._internal.execution.train_fn_utils": ("LocalTrainFnUtils", "set_train_fn_utils"),
    "ray.train.v2._internal.execution.checkpoint.checkpoint_manager": ("CheckpointManager",),
    "ray.train.v2._internal.execution.training_report": ("_TrainingReport",),
    "ray.train.v2._internal.execution.local_mode.torch": ("has_torchrun_env",),
    "ray.train.v2._internal.execution.context": ("is_managed_checkpoint",),
    "ray.train.v2._internal.execution.storage": ("delete_fs_path",),
    "ray.air._internal.torch_utils": ("contains_tensor",),
    "ray.train.v2.api.context": ("LocalTrainContext",),
    "ray.train.v2.api.callback": ("UserCallback",),
    "ray.train.v2.api.exceptions": ("WorkerGroupError",),
    "ray.train.v2.api.report_config": ("CheckpointConsistencyMode", "CheckpointUploadMode"),
    "ray.train.v2.api.reported_checkpoint": ("ReportedCheckpoint", "ReportedCheckpointStatus"),
    "ray.train": ("Checkpoint", "DataConfig", "Result"),
}


def missing() -> str | None:
    """The first piece of Ray Train this Ray lacks ("module.name"), or None."""
    import importlib

    for mod, names in NEEDED.items():
        try:
            m = importlib.import_module(mod)
        except ImportError:
            return mod
        for name in names:
            if not hasattr(m, name):
                return f"{mod}.{name}"
    return None


def _patch(module: Any) -> None:
    import functools
    import sys

    cls = module.DataParallelTrainer
    original = getattr(cls, "_initialize_and_run_local_controller", None)
    if original is None or getattr(original, "__rtdebug__", False):
        return
    lacking = missing()
    if lacking is not None:
        import ray

        print(
            f"rtdebug: Ray {ray.__version__} has no {lacking}: its own local mode runs (as --ray-local-mode=ray); "
            "the cluster's semantics need Ray 2.60",
            file=sys.stderr,
            flush=True,
        )
        return

    @functools.wraps(original)
    def run_local(self: Any, train_func: Any) -> Any:
        from rtdebug.rank.localmode.controller import run

        return run(self, train_func)

    run_local.__rtdebug__ = True  # type: ignore[attr-defined]
    cls._initialize_and_run_local_controller = run_local
