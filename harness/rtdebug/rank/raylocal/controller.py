"""``fit()`` in local mode with the cluster's semantics: one ``LocalRun`` per rank, rank 0 the controller.

``run(trainer, train_func)`` replaces ``DataParallelTrainer._initialize_and_run_local_controller``. It
builds the process group as Ray's ``LocalTorchController`` does (from torchrun's variables), agrees on the
run's name (a default name is a timestamp each rank takes), opens the run's storage, restores its history
(rank 0, ``history.Controller``), shards Ray Data, runs the train function with ``fnutils`` behind
``ray.train.*``, restarts it per ``FailureConfig``, and returns the cluster's ``Result`` on every rank.

``report()`` is the cluster's: the ranks meet (``exchange``) and take rank 0's checkpoint directory name
(Ray's ``checkpoint_<date>`` or ``checkpoint_dir_name=``); each rank copies its files into
``storage_path/name/<dir>`` before ``report()`` returns (``checkpoint_upload_mode=SYNC``; ``ASYNC``
copies in a thread and is registered at the next Ray Train call; ``NO_UPLOAD`` keeps a checkpoint already
in the run's directory); rank 0 registers it in the history and calls the callbacks with every rank's
metrics in rank order; every rank learns the new history before it goes on.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from dataclasses import dataclass
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.rank.raylocal import recording
from rtdebug.rank.raylocal.exchange import Exchange, World
from rtdebug.rank.raylocal.history import Controller, Snapshot

REPORT = "ray.train.report"
BARRIER = "ray.train.collective.barrier"
BROADCAST = "ray.train.collective.broadcast_from_rank_zero"
FIT = "rtdebug.fit"  # the ranks agree on the run (not one of Ray Train's collectives)


@dataclass(frozen=True)
class Proposal:
    """What a rank brings to a ``report()``: the meeting agrees on one directory from these."""

    dir_name: str
    explicit: bool  # checkpoint_dir_name= was given
    has_checkpoint: bool
    metrics: dict[str, Any]


@dataclass(frozen=True)
class Upload:
    """How a rank's copy went: the persisted checkpoint, or one line saying why not."""

    checkpoint: Any = None
    error: str | None = None


@dataclass
class Pending:
    """An ``ASYNC`` upload still copying: registered at the next Ray Train call of this rank."""

    n: int
    dir_name: str
    metrics: list[dict[str, Any]]
    thread: threading.Thread
    result: list[Upload]


class LocalRun:
    """One rank's part of one ``fit()``."""

    def __init__(self, world: World, exchange: Exchange, run_config: Any, storage: Any, snapshot: Snapshot) -> None:
        self.world, self.exchange, self.run_config, self.storage = world, exchange, run_config, storage
        self.snapshot = snapshot
        self.run_context: Any = None  # the trainer's TrainRunContext, for the callbacks
        self.controller: Controller | None = None  # rank 0's
        self.pending: Pending | None = None
        self.noted: set[str] = set()

    # -- the user's calls -------------------------------------------------------------------------

    def barrier(self) -> None:
        self.settle()
        n = self.exchange.next_call(BARRIER)
        with recording.call(BARRIER):
            self.exchange.meet(BARRIER, n, None, want_all=False)

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        self.settle()
        n = self.exchange.next_call(BROADCAST)
        with recording.call(BROADCAST):
            mine = data if self.world.rank == 0 else None
            if self.world.rank == 0:
                self.exchange.meet(BROADCAST, n, mine, want_all=False)
                self.exchange.publish(BROADCAST, n, data)
                return data
            self.exchange.meet(BROADCAST, n, None, want_all=False)
            return self.exchange.answer(BROADCAST, n)

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Any,
        dir_name: str | None,
        mode: Any,
        delete_after: bool,
        upload_fn: Any,
        validation: Any,
    ) -> None:
        from ray.train.v2.api.report_config import CheckpointUploadMode

        _check_metrics(metrics)
        if validation:
            self.note_once(
                "validation",
                "report(validation=...) is not run in local mode: the checkpoint is registered unvalidated",
            )
        mode = CheckpointUploadMode(mode)
        self.settle()
        n = self.exchange.next_call(REPORT)
        with recording.call(REPORT):
            mine = Proposal(
                dir_name or self.storage.make_default_checkpoint_dir_name(),
                dir_name is not None,
                checkpoint is not None,
                metrics,
            )
            proposals: list[Proposal] = self.exchange.meet(REPORT, n, mine) or [mine]
            named = {r: p.dir_name for r, p in enumerate(proposals) if p.explicit}
            if len(set(named.values())) > 1:
                listed = ", ".join(f"rank {r}: {v!r}" for r, v in sorted(named.items()))
                raise HarnessError(f"ray.train.report #{n}: checkpoint_dir_name differs across ranks ({listed})")
            chosen = proposals[0].dir_name  # rank 0's, as Ray broadcasts it from rank zero
            all_metrics = [p.metrics for p in proposals]
            if not any(p.has_checkpoint for p in proposals):
                self.register(n, chosen, all_metrics, [])
                return
            if mode == CheckpointUploadMode.ASYNC and checkpoint is not None:
                box: list[Upload] = []
                t = threading.Thread(
                    target=lambda: box.append(self.upload(checkpoint, chosen, delete_after, upload_fn, mode)),
                    name="rtdebug-ray-train-upload",
                    daemon=True,
                )
                t.start()
                self.pending = Pending(n, chosen, all_metrics, t, box)
                return
            if mode == CheckpointUploadMode.ASYNC:  # this rank has nothing to copy: it can register at once
                self.pending = Pending(n, chosen, all_metrics, _done_thread(), [Upload()])
                return
            mine_up = self.upload(checkpoint, chosen, delete_after, upload_fn, mode)
            self.finish_report(n, chosen, all_metrics, mine_up)

    def latest_checkpoint(self) -> Any:
        self.settle()
        latest = self.snapshot.latest
        return latest[0] if latest else None

    def reported_checkpoints(self) -> list[Any]:
        from ray.train.v2.api.reported_checkpoint import ReportedCheckpoint, ReportedCheckpointStatus

        self.settle()
        return [
            ReportedCheckpoint(checkpoint=c, metrics=m, status=ReportedCheckpointStatus.COMMITTED)
            for c, m in self.snapshot.history
        ]

    # -- the parts --------------------------------------------------------------------------------

    def settle(self) -> None:
        """Register an ``ASYNC`` upload still pending (before any later Ray Train call, and at the end)."""
        p, self.pending = self.pending, None
        if p is None:
            return
        p.thread.join()
        self.finish_report(p.n, p.dir_name, p.metrics, p.result[0] if p.result else Upload(error="upload died"))

    def upload(self, checkpoint: Any, dir_name: str, delete_after: bool, upload_fn: Any, mode: Any) -> Upload:
        """Copy this rank's checkpoint into the run's directory (Ray's own copy), or say in one line why not."""
        from ray.train.v2._internal.execution.context import is_managed_checkpoint
        from ray.train.v2.api.report_config import CheckpointUploadMode

        if checkpoint is None:
            return Upload()
        rank = self.world.rank
        if mode == CheckpointUploadMode.NO_UPLOAD:
            if not is_managed_checkpoint(self.storage, checkpoint):
                raise ValueError(
                    "Your `ray.train.report(checkpoint)` is outside the experiment directory "
                    f"({self.storage.experiment_fs_path}): with checkpoint_upload_mode=NO_UPLOAD it must be in it"
                )
            return Upload(checkpoint)
        if not os.path.exists(checkpoint.path) and _is_local(checkpoint):
            return Upload(error=_vanished(rank, checkpoint))
        dest = self.storage.build_checkpoint_path_from_name(dir_name)
        try:
            if upload_fn is not None:
                persisted = upload_fn(checkpoint, dir_name)
                from ray.train import Checkpoint

                if not isinstance(persisted, Checkpoint):
                    raise ValueError(
                        f"checkpoint_upload_fn must return a `ray.train.Checkpoint`. Actual type is {type(persisted)}"
                    )
                if not is_managed_checkpoint(self.storage, persisted):
                    raise ValueError(
                        "Your `checkpoint_upload_fn` returned a checkpoint outside the experiment directory "
                        f"({self.storage.experiment_fs_path})"
                    )
            else:
                persisted = self.storage.persist_current_checkpoint(checkpoint, dir_name)
        except FileNotFoundError:
            return Upload(error=_vanished(rank, checkpoint))
        except OSError as exc:
            return Upload(error=f"rank {rank} could not write its checkpoint into {dest}: {_reason(exc)}")
        if delete_after:
            from ray.train.v2._internal.execution.storage import delete_fs_path

            try:
                delete_fs_path(checkpoint.filesystem, checkpoint.path)
            except Exception as exc:
                print(f"rtdebug: could not delete the local checkpoint {checkpoint.path}: {exc}", file=sys.stderr)
        return Upload(persisted)

    def finish_report(self, n: int, dir_name: str, metrics: list[dict[str, Any]], mine: Upload) -> None:
        op = REPORT + "/upload"
        uploads: list[Upload] = self.exchange.meet(op, n, mine, want_all=self.world.rank == 0) or [mine]
        self.register(n, dir_name, metrics, uploads)

    def register(self, n: int, dir_name: str, metrics: list[dict[str, Any]], uploads: list[Upload]) -> None:
        """Rank 0 registers the report as the cluster's controller does; every rank learns the history."""
        if self.world.rank == 0:
            assert self.controller is not None
            error = None
            try:
                errors = [u.error for u in uploads if u.error]
                if errors:
                    self.discard(dir_name)
                    error = f"ray.train.report #{n}: {errors[0]}; nothing of it was kept"
                else:
                    persisted = [u.checkpoint for u in uploads if u.checkpoint is not None]
                    paths = {c.path for c in persisted}
                    if len(paths) > 1:
                        error = (
                            f"ray.train.report #{n}: the ranks' checkpoints are in different directories "
                            f"({', '.join(sorted(paths))}); they must be one"
                        )
                    else:
                        self.controller.after_report(persisted[0] if persisted else None, metrics)
            except HarnessError as exc:
                error = exc.message
            snap = self.controller.snapshot(error)
            self.exchange.publish(REPORT, n, snap)
        else:
            snap = self.exchange.answer(REPORT, n)
        self.snapshot = snap
        if snap.error:
            raise HarnessError(snap.error)

    def discard(self, dir_name: str) -> None:
        """A report that failed leaves nothing half-written: its directory goes, unless the history has it."""
        path = self.storage.build_checkpoint_path_from_name(dir_name)
        if any(c.path == path for c, _ in self.snapshot.history):
            return
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)

    def note_once(self, key: str, line: str) -> None:
        if key not in self.noted and self.world.rank == 0:
            self.noted.add(key)
            print(f"rtdebug: {line}", file=sys.stderr, flush=True)


def run(trainer: Any, train_func: Any) -> Any:
    """The cluster's ``fit()`` in this rank; the same ``Result`` on every rank."""
    from ray.train.v2._internal.execution.train_fn_utils import set_train_fn_utils

    from rtdebug.rank.raylocal.fnutils import ClusterTrainFnUtils

    world, made_group = _init_world(trainer)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    exchange = Exchange.create(world, attempt)
    shards: dict[str, Any] | None = None
    try:
        local = _open(trainer, world, exchange)
        shards = _datasets(trainer, world, exchange)
        failures = 0
        max_failures = _max_failures(trainer.run_config)
        _say_at_start(local, trainer, max_failures)
        while True:
            set_train_fn_utils(ClusterTrainFnUtils(local, shards))
            try:
                value = train_func()
                local.settle()
                break
            except HarnessError:
                raise
            except Exception as exc:
                _after_exception(local, exc)
                if world.size == 1 and (max_failures < 0 or failures < max_failures):
                    failures += 1
                    latest = local.latest_checkpoint()
                    print(
                        f"rtdebug: the train function failed ({type(exc).__name__}: {exc}); FailureConfig restarts it "
                        f"({failures} of {'unlimited' if max_failures < 0 else max_failures}) from "
                        f"{latest.path if latest else 'the start (no checkpoint yet)'}",
                        file=sys.stderr,
                        flush=True,
                    )
                    continue
                if world.size > 1 and _torchrun_restarts_left(max_failures, attempt):
                    raise  # torchrun restarts every rank together; the new ranks resume from the history
                raise _training_failed(world, exc) from exc
        return _result(local.snapshot, value)
    finally:
        if shards is not None and world.size > 1:
            from rtdebug.rank.raylocal import data

            data.close()
        if made_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _init_world(trainer: Any) -> tuple[World, bool]:
    """The process group, made as Ray's ``LocalTorchController`` makes it (torchrun's variables)."""
    if not _is_torch_trainer(trainer):
        return World(), False
    from ray.train.v2._internal.execution.local_mode.torch import has_torchrun_env

    if not has_torchrun_env():
        return World(), False
    import torch
    import torch.distributed as dist

    assert not dist.is_initialized(), "torch.distributed is already initialized"
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return World(size, rank, local_rank, local_size, rank // local_size), True


def _is_torch_trainer(trainer: Any) -> bool:
    mod = sys.modules.get("ray.train.v2.torch.torch_trainer")
    return mod is not None and isinstance(trainer, mod.TorchTrainer)


def _open(trainer: Any, world: World, exchange: Exchange) -> LocalRun:
    """Everyone takes rank 0's run name; rank 0 opens the history (a resume) and tells the others."""
    rc = trainer.run_config
    n = exchange.next_call(FIT)
    # a default name is a timestamp each rank takes, a storage path may be a temp dir of each rank's own:
    # every rank takes rank 0's, as every worker of a cluster takes the driver's
    chosen = (exchange.meet(FIT, n, (rc.name, rc.storage_path)) or [(rc.name, rc.storage_path)])[0]
    rc.name, rc.storage_path = chosen
    controller = None
    if world.rank == 0:
        try:
            controller = Controller(rc, trainer.train_run_context)
            snap = controller.snapshot()
        except HarnessError as exc:
            snap = Snapshot("", None, error=exc.message)
        exchange.publish(FIT, n, snap)
    else:
        snap = exchange.answer(FIT, n)
    if snap.error:
        raise HarnessError(snap.error)
    storage = controller.storage if controller is not None else _storage(rc)
    local = LocalRun(world, exchange, rc, storage, snap)
    local.controller, local.run_context = controller, trainer.train_run_context
    return local


def _storage(run_config: Any) -> Any:
    try:
        return run_config.storage_context
    except (OSError, RuntimeError) as exc:
        where = run_config.storage_path
        raise HarnessError(f"RunConfig(storage_path={where!r}) cannot be written: {_reason(exc)}") from None


def _datasets(trainer: Any, world: World, exchange: Exchange) -> dict[str, Any] | None:
    datasets = trainer.datasets
    if not datasets:
        return None
    if world.size == 1:  # as Ray's local mode: the whole dataset
        return {k: v() if callable(v) else v for k, v in datasets.items()}
    from rtdebug.rank.raylocal import data

    return data.shard_datasets(datasets, trainer.data_config, world.size, world.rank, _DataExchange(exchange))


class _DataExchange:
    """``data``'s view of the meetings: a broadcast from one rank, and a barrier."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        op = "rtdebug.data"
        n = self.exchange.next_call(op)
        got = self.exchange.meet(op, n, obj if self.exchange.world.rank == src else None)
        return got[src] if got else obj

    def barrier(self) -> None:
        op = "rtdebug.data"
        n = self.exchange.next_call(op)
        self.exchange.meet(op, n, None, want_all=False)


def _max_failures(run_config: Any) -> int:
    fc = getattr(run_config, "failure_config", None)
    return int(getattr(fc, "max_failures", 0) or 0) if fc is not None else 0


def _torchrun_restarts_left(max_failures: int, attempt: int) -> bool:
    max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    allowed = max_restarts if max_failures < 0 else min(max_failures, max_restarts)
    return attempt < allowed


def _say_at_start(local: LocalRun, trainer: Any, max_failures: int) -> None:
    """Once, on rank 0: which semantics, where checkpoints go, and what cannot be done here."""
    w, snap = local.world, local.snapshot
    if w.rank != 0:
        return
    ranks = f"{w.size} rank{'s' if w.size > 1 else ''}"
    resumed = f"; resuming from {snap.resumed_from}" if snap.resumed_from else ""
    print(
        f"rtdebug: Ray Train local mode with the cluster's semantics on {ranks} (--ray-local-mode=ray for Ray's "
        f"own): checkpoints go to {snap.experiment_path}{resumed}",
        file=sys.stderr,
        flush=True,
    )
    ctl = local.controller
    if ctl is not None and ctl.ignored_callbacks:
        names = ", ".join(type(cb).__name__ for cb in ctl.ignored_callbacks)
        print(f"rtdebug: RunConfig(callbacks=): {names}: not UserCallbacks, not called in local mode", file=sys.stderr)
    if w.size > 1 and max_failures != 0:
        max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
        wanted = "unlimited" if max_failures < 0 else str(max_failures)
        if max_failures < 0 or max_restarts < max_failures:
            print(
                f"rtdebug: FailureConfig(max_failures={max_failures}) restarts every rank together through torchrun: "
                f"this job allows {max_restarts} restart(s); pass --max-restarts {wanted if max_failures > 0 else 'N'} "
                "to rtdebug torchrun for the cluster's behaviour",
                file=sys.stderr,
                flush=True,
            )
    if getattr(trainer, "validation_config", None) is not None:
        print("rtdebug: validation_config is not run in local mode", file=sys.stderr)


def _after_exception(local: LocalRun, exc: BaseException) -> None:
    """The callbacks' ``after_exception``: in rank 0 for its own failure (or the only rank's), else in the
    failing rank, with that rank's exception (a rank cannot hear of another's failure while it waits)."""
    ctl = local.controller
    if ctl is None:
        from ray.train.v2.api.callback import UserCallback

        cbs = [cb for cb in (local.run_config.callbacks or []) if isinstance(cb, UserCallback)]
        for cb in cbs:
            try:
                cb.after_exception(run_context=local.run_context, worker_exceptions={local.world.rank: exc})
            except Exception as cb_exc:
                what = f"{type(cb).__name__}.after_exception raised {type(cb_exc).__name__}: {cb_exc}"
                raise HarnessError(f"RunConfig(callbacks=): {what}") from cb_exc
        return
    ctl.after_exception({local.world.rank: exc})


def _training_failed(world: World, exc: BaseException) -> BaseException:
    """The error ``fit()`` raises on a cluster when a worker's train function fails."""
    from ray.train.v2.api.exceptions import WorkerGroupError

    message = f"[Rank {world.rank}]\n{type(exc).__name__}: {exc}"
    return WorkerGroupError(message, {world.rank: exc})


def _result(snap: Snapshot, value: Any) -> Any:
    from ray.train import Result

    latest = snap.latest
    frame = None
    if snap.best:
        import pandas as pd  # type: ignore[import-untyped]

        frame = pd.DataFrame([m for _, m in snap.best])
    return Result(
        metrics=latest[1] if latest else None,
        checkpoint=latest[0] if latest else None,
        error=None,
        path=snap.experiment_path,
        best_checkpoints=snap.best,
        metrics_dataframe=frame,
        _storage_filesystem=snap.filesystem,
        return_value=value,
    )


def _check_metrics(metrics: dict[str, Any]) -> None:
    if "torch" in sys.modules:
        from ray.air._internal.torch_utils import contains_tensor

        if contains_tensor(metrics):
            raise ValueError(
                "Passing objects containing Torch tensors as metrics is not supported as it will throw an "
                "exception on deserialization. You can either convert the tensors to Python objects (ex: "
                "`.numpy()`, `.item()`, etc.) or save tensors as part of the checkpoint files instead."
            )


def _is_local(checkpoint: Any) -> bool:
    fs = getattr(checkpoint, "filesystem", None)
    return fs is None or getattr(fs, "type_name", "local") == "local"


def _done_thread() -> threading.Thread:
    t = threading.Thread(target=lambda: None, daemon=True)
    t.start()
    return t


def _vanished(rank: int, checkpoint: Any) -> str:
    return f"rank {rank}'s checkpoint directory {checkpoint.path} does not exist (deleted before report()?)"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
