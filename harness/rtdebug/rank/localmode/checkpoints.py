"""Rank 0 plays the cluster's controller: the run's checkpoint history, and the user's callbacks.

The history is Ray's own ``CheckpointManager``, driven step by step instead of from the controller's
event loop: it writes the same snapshot file under ``storage_path/name/``, so running the same script
again with the same ``name`` resumes from it (as Ray's restore does, and a later cluster run finds it
too), ``CheckpointConfig(num_to_keep, checkpoint_score_attribute, checkpoint_score_order)`` orders and
drops checkpoints as on a cluster, and a dropped checkpoint is deleted from disk. What every rank needs
of it (the latest checkpoint, the history, the result's fields) travels as a ``Snapshot``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtdebug.common.errors import HarnessError


@dataclass
class Snapshot:
    """What every rank knows of the run, as rank 0's history has it after the last report."""

    experiment_path: str
    filesystem: Any  # pyarrow filesystem of the storage path (sent once, at the start)
    history: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, metrics), Ray's order
    latest: tuple[str, dict[str, Any]] | None = None  # the latest checkpoint's path and its metrics
    best: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # Result.best_checkpoints
    resumed_from: str | None = None  # the checkpoint a resumed run starts from
    error: str | None = None  # a controller-side failure every rank raises (one line)


def _manager_class() -> Any:
    from ray.train.v2._internal.execution.checkpoint.checkpoint_manager import CheckpointManager

    class StepwiseCheckpointManager(CheckpointManager):
        """Ray's manager without its event loop: nobody awaits its condition here."""

        def _notify(self) -> None:
            return None

    return StepwiseCheckpointManager


class Controller:
    """Rank 0's part: the history and the callbacks, for one ``fit()``."""

    def __init__(self, run_config: Any, run_context: Any) -> None:
        from ray.train.v2.api.callback import UserCallback

        self.run_context = run_context
        self.callbacks = [cb for cb in (run_config.callbacks or []) if isinstance(cb, UserCallback)]
        self.ignored_callbacks = [cb for cb in (run_config.callbacks or []) if not isinstance(cb, UserCallback)]
        self.storage = open_storage(run_config)
        try:
            self.manager = _manager_class()(
                checkpoint_config=run_config.checkpoint_config, storage_context=self.storage
            )
        except Exception as exc:
            if type(exc).__name__ == "CheckpointManagerInitializationError":
                raise HarnessError(
                    f"cannot resume run {run_config.name!r}: its snapshot names a checkpoint that no longer exists "
                    f"({_missing(self.manager_snapshot_path())}); use a new RunConfig(name) or delete "
                    f"{self.storage.experiment_fs_path}"
                ) from None
            raise
        latest = self.manager.latest_checkpoint_result
        self.resumed_from = latest.checkpoint.path if latest is not None and latest.checkpoint else None

    def manager_snapshot_path(self) -> str:
        return str(self.storage.checkpoint_manager_snapshot_path)

    def after_report(self, checkpoint: Any, metrics: list[dict[str, Any]]) -> None:
        """One report of every rank: the history first, then the callbacks, as the cluster's controller."""
        from ray.train.v2._internal.execution.training_report import _TrainingReport

        report = _TrainingReport(checkpoint=checkpoint, metrics=metrics[0], validation=False)
        self.manager.after_report(training_report=report, metrics=metrics)
        for cb in self.callbacks:
            try:
                cb.after_report(run_context=self.run_context, metrics=metrics, checkpoint=checkpoint)
            except Exception as exc:
                raise HarnessError(
                    f"RunConfig(callbacks=): {type(cb).__name__}.after_report raised {type(exc).__name__}: {exc}"
                ) from exc

    def after_exception(self, failures: dict[int, BaseException]) -> None:
        for cb in self.callbacks:
            try:
                cb.after_exception(run_context=self.run_context, worker_exceptions=failures)
            except Exception as exc:
                raise HarnessError(
                    f"RunConfig(callbacks=): {type(cb).__name__}.after_exception raised {type(exc).__name__}: {exc}"
                ) from exc

    def snapshot(self, error: str | None = None, with_filesystem: bool = True) -> Snapshot:
        """The history as paths and metrics (the filesystem only when asked: it is sent once, at the start)."""
        m = self.manager
        latest = m.latest_checkpoint_result
        return Snapshot(
            experiment_path=str(self.storage.experiment_fs_path),
            filesystem=self.storage.storage_filesystem if with_filesystem else None,
            history=[(r.checkpoint.path, r.metrics) for r in getattr(m, "_checkpoint_results", [])],
            latest=(latest.checkpoint.path, latest.metrics) if latest is not None else None,
            best=[(r.checkpoint.path, r.metrics) for r in m.best_checkpoint_results],
            resumed_from=self.resumed_from,
            error=error,
        )


def open_storage(run_config: Any) -> Any:
    """The run's ``StorageContext`` (it makes ``storage_path/name/`` and checks it can be written), or one line."""
    try:
        return run_config.storage_context
    except (OSError, RuntimeError) as exc:
        where = run_config.storage_path
        raise HarnessError(f"RunConfig(storage_path={where!r}) cannot be written: {reason(exc)}") from None


def reason(exc: BaseException) -> str:
    """An exception's first line (its type where it has no text)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _missing(snapshot_path: str) -> str:
    """The first checkpoint the snapshot names that is gone (for the one-line error)."""
    import json
    import os

    try:
        with open(snapshot_path, encoding="utf-8") as f:
            state = json.load(f)
        for r in state.get("checkpoint_results", []):
            path = r.get("checkpoint_dir_name") or r.get("checkpoint", "")
            full = path if os.path.isabs(str(path)) else os.path.join(os.path.dirname(snapshot_path), str(path))
            if not os.path.exists(full):
                return full
    except (OSError, ValueError, AttributeError):
        pass
    return "see " + snapshot_path
