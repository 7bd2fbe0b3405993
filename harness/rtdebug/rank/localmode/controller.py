"""``fit()`` in local mode with the cluster's semantics, in each rank; the same ``Result`` on every rank.

``run(trainer, train_func)`` replaces ``DataParallelTrainer._initialize_and_run_local_controller``. It
builds the process group as Ray's ``LocalTorchController`` does (from torchrun's variables), agrees on the
run's name and storage path (a default name is a timestamp each rank takes), opens the run's storage,
restores its history (rank 0, ``history.Controller``), shards Ray Data, runs the train function with
``fnutils`` behind ``ray.train.*`` (each call: ``localrun``), restarts it per ``FailureConfig``, and returns
the cluster's ``Result``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.rank.localmode import notes
from rtdebug.rank.localmode.checkpoints import Controller, Snapshot, open_storage
from rtdebug.rank.localmode.localrun import LocalRun
from rtdebug.rank.localmode.sync import CallExchange, World

FIT = "rtdebug.fit"  # the ranks agree on the run (not one of Ray Train's collectives)
_fits = 0  # this process's fit() calls so far (every rank makes as many): each has key spaces of its own


def run(trainer: Any, train_func: Any) -> Any:
    """The cluster's ``fit()`` in this rank; the same ``Result`` on every rank."""
    from ray.train.v2._internal.execution.train_fn_utils import set_train_fn_utils

    from rtdebug.rank.localmode.fnutils import ClusterTrainFnUtils

    global _fits
    _fits += 1
    world, made_group = _init_world(trainer, _fits)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    exchange = CallExchange.create(world, attempt, _fits)
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
        return _result(local, value)
    finally:
        if shards is not None and world.size > 1:
            from rtdebug.rank.localmode import data

            data.close()
        if made_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _init_world(trainer: Any, fit: int = 1) -> tuple[World, bool]:
    """The process group, made as Ray's ``LocalTorchController`` makes it (torchrun's variables)."""
    if not _is_torch_trainer(trainer):
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
            raise HarnessError(
                f"{type(trainer).__name__} in local mode on {os.environ['WORLD_SIZE']} torchrun ranks: only a "
                "TorchTrainer joins torchrun's ranks; use TorchTrainer, or --ray-local-mode=ray"
            )
        return World(), False
    from ray.train.v2._internal.execution.local_mode.torch import has_torchrun_env

    if not has_torchrun_env():
        return World(), False
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        raise HarnessError(
            "the script called torch.distributed.init_process_group before fit(): in local mode under torchrun, "
            "fit() makes the process group itself (as Ray's LocalTorchController does); remove that call"
        )
    _init_group(dist, "nccl" if torch.cuda.is_available() else "gloo", fit)
    rank, size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return World(size, rank, local_rank, local_size, rank // local_size), True


def _init_group(dist: Any, backend: str, fit: int) -> None:
    """``init_process_group`` from torchrun's variables, as torch does it (``env://``, the job's store under
    ``default_pg``), except that fit number 2, 3, ... of this process gets keys of its own: the group of an
    earlier ``fit()`` was destroyed, torch numbers the new one as the first, and its ranks would read each
    other's old addresses from the store (gloo: "Connection refused", then a wait to the timeout)."""
    if fit == 1:
        dist.init_process_group(backend=backend)
        return
    timeout = dist.distributed_c10d.default_pg_timeout  # rtdebug's --pg-timeout (rank.localmode.fixes)
    store, rank, size = next(dist.rendezvous("env://", timeout=timeout))
    store.set_timeout(timeout)
    store = dist.PrefixStore(f"default_pg/rtdebug-fit-{fit}", store)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=size, timeout=timeout)


def _is_torch_trainer(trainer: Any) -> bool:
    mod = sys.modules.get("ray.train.v2.torch.torch_trainer")
    return mod is not None and isinstance(trainer, mod.TorchTrainer)


def _open(trainer: Any, world: World, exchange: CallExchange) -> LocalRun:
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
    storage = controller.storage if controller is not None else open_storage(rc)
    local = LocalRun(world, exchange, rc, storage, snap, controller, trainer.train_run_context)
    return local


def _datasets(trainer: Any, world: World, exchange: CallExchange) -> dict[str, Any] | None:
    datasets = trainer.datasets
    if not datasets:
        return None
    if world.size == 1:  # as Ray's local mode: the whole dataset
        return {k: v() if callable(v) else v for k, v in datasets.items()}
    from rtdebug.rank.localmode import data

    return data.shard_datasets(datasets, trainer.data_config, world.size, world.rank, DataMeetings(exchange))


class DataMeetings:
    """``data``'s view of the meetings: a broadcast from one rank, and a barrier."""

    def __init__(self, exchange: CallExchange) -> None:
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
    if w.size > 1 and (max_failures != 0 or int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0):
        max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
        wanted = "unlimited" if max_failures < 0 else str(max_failures)
        if 0 <= max_failures < max_restarts:
            print(
                f"rtdebug: torchrun's --max-restarts {max_restarts} goes past FailureConfig(max_failures="
                f"{max_failures}): torchrun restarts the ranks even once FailureConfig would not",
                file=sys.stderr,
                flush=True,
            )
        elif max_failures < 0 or max_restarts < max_failures:
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
    notes.say(f"rank {world.rank}: {notes.fit_raises(exc)}" if world.size > 1 else notes.fit_raises(exc))
    return WorkerGroupError(message, {world.rank: exc})


def _result(local: LocalRun, value: Any) -> Any:
    from ray.train import Result

    snap = local.snapshot
    latest = snap.latest
    name = local.run_config.name
    local.say("Result.metrics", notes.result_metrics(local.seen, latest, name))
    local.say("Result.checkpoint", notes.result_checkpoint(local.seen, latest, name))
    frame = None
    if snap.best:
        import pandas as pd  # type: ignore[import-untyped]

        frame = pd.DataFrame([m for _, m in snap.best])
    return Result(
        metrics=latest[1] if latest else None,
        checkpoint=local.checkpoint(latest[0]) if latest else None,
        error=None,
        path=snap.experiment_path,
        best_checkpoints=[(local.checkpoint(p), m) for p, m in snap.best],
        metrics_dataframe=frame,
        _storage_filesystem=snap.filesystem,
        return_value=value,
    )
