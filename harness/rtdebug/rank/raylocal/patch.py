"""The seam: the V2 trainer's local controller, replaced when (if ever) the job imports the trainer."""

from __future__ import annotations

from typing import Any

TRAINER_MODULE = "ray.train.v2.api.data_parallel_trainer"


def install() -> None:
    """Replace the V2 trainer's local controller when (if ever) the job imports it."""
    from rtdebug.common.imports import when_imported

    when_imported(TRAINER_MODULE, _patch)


def _patch(module: Any) -> None:
    import functools

    cls = module.DataParallelTrainer
    original = cls._initialize_and_run_local_controller
    if getattr(original, "__rtdebug__", False):
        return

    @functools.wraps(original)
    def run_local(self: Any, train_func: Any) -> Any:
        from rtdebug.rank.raylocal.controller import run

        return run(self, train_func)

    run_local.__rtdebug__ = True  # type: ignore[attr-defined]
    cls._initialize_and_run_local_controller = run_local
