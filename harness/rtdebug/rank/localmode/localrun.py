"""One rank's part of one ``fit()`` (``LocalRun``): what the train function's Ray Train calls do.

``report()`` is the cluster's: the ranks meet (``exchange``) and take rank 0's checkpoint directory name
(Ray's ``checkpoint_<date>`` or ``checkpoint_dir_name=``); each rank copies its files into
``storage_path/name/<dir>`` before ``report()`` returns (``checkpoint_upload_mode=SYNC``; ``ASYNC``
copies in a thread and is registered at the next Ray Train call; ``NO_UPLOAD`` keeps a checkpoint already
in the run's directory); rank 0 registers it in the history and calls the callbacks with every rank's
metrics in rank order; every rank learns the new history before it goes on. ``barrier`` and
``broadcast_from_rank_zero`` meet every rank the same way.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.rank.localmode import notes, recording
from rtdebug.rank.localmode.checkpoints import Controller, Snapshot, reason
from rtdebug.rank.localmode.sync import CallExchange, World

REPORT = "ray.train.report"
BARRIER = "ray.train.collective.barrier"
BROADCAST = "ray.train.collective.broadcast_from_rank_zero"


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
    upload: Future[Upload]  # this rank's copy, done in a thread (or already done: nothing to copy)


class LocalRun:
    """One rank's part of one ``fit()``."""

    def __init__(
        self,
        world: World,
        exchange: CallExchange,
        run_config: Any,
        storage: Any,
        snapshot: Snapshot,
        controller: Controller | None,  # rank 0's
        run_context: Any,  # the trainer's TrainRunContext, for the callbacks
    ) -> None:
        self.world, self.exchange, self.run_config, self.storage = world, exchange, run_config, storage
        self.snapshot, self.controller, self.run_context = snapshot, controller, run_context
        self.filesystem = snapshot.filesystem
        self._checkpoints: dict[str, Any] = {}  # path -> the one Checkpoint object this rank hands out for it
        self.pending: Pending | None = None
        self.noted: set[str] = set()
        self.seen = notes.Reports(world.size)  # this run's reports, for the lines where Ray's value differs

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
            if self.world.rank == 0:
                self.exchange.meet(BROADCAST, n, None, want_all=False)
                self.exchange.publish(BROADCAST, n, data)
                return data
            self.exchange.meet(BROADCAST, n, None, want_all=False)
            got = self.exchange.answer(BROADCAST, n)
        if "broadcast" not in self.noted and not notes.same(got, data):
            self.noted.add("broadcast")
            if self.exchange.first("broadcast"):
                notes.say(notes.broadcast(self.world.rank))
        return got

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
            self.seen.add(all_metrics, [p.has_checkpoint for p in proposals])
            if not any(p.has_checkpoint for p in proposals):
                self.register_metrics(all_metrics)
                return
            if mode == CheckpointUploadMode.ASYNC:
                done: Future[Upload] = Future()
                if checkpoint is None:  # this rank has nothing to copy: it registers with the others, later
                    done.set_result(Upload())
                else:
                    copy = functools.partial(self.upload, checkpoint, chosen, delete_after, upload_fn, mode)
                    threading.Thread(
                        target=_into,
                        args=(done, copy),
                        name="rtdebug-ray-train-upload",
                        daemon=True,
                    ).start()
                self.pending = Pending(n, chosen, all_metrics, done)
                return
            mine_up = self.upload(checkpoint, chosen, delete_after, upload_fn, mode)
            self.finish_report(n, chosen, all_metrics, mine_up)

    def checkpoint(self, path: str) -> Any:
        """The ``Checkpoint`` at ``path`` in the run's storage (one object per path, as the history keeps)."""
        c = self._checkpoints.get(path)
        if c is None:
            from ray.train import Checkpoint

            c = self._checkpoints[path] = Checkpoint(path, self.filesystem)
        return c

    def latest_checkpoint(self) -> Any:
        self.settle()
        latest = self.snapshot.latest
        return self.checkpoint(latest[0]) if latest else None

    def get_checkpoint(self) -> Any:
        """The train function's ``get_checkpoint()``: the run's latest, said once where Ray's would be None."""
        found = self.latest_checkpoint()
        self.say("get_checkpoint", notes.get_checkpoint(self.seen, self.snapshot.latest, self.run_config.name))
        return found

    def reported_checkpoints(self) -> list[Any]:
        from ray.train.v2.api.reported_checkpoint import ReportedCheckpoint, ReportedCheckpointStatus

        self.settle()
        self.say("reported", notes.reported_checkpoints(self.world.size, len(self.snapshot.history)))
        return [
            ReportedCheckpoint(checkpoint=self.checkpoint(p), metrics=m, status=ReportedCheckpointStatus.COMMITTED)
            for p, m in self.snapshot.history
        ]

    # -- the parts --------------------------------------------------------------------------------

    def settle(self) -> None:
        """Register an ``ASYNC`` upload still pending (before any later Ray Train call, and at the end)."""
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            mine = p.upload.result()
        except Exception as exc:  # the copy itself raised (a checkpoint_upload_fn's error): one line for all
            mine = Upload(error=f"rank {self.world.rank}'s checkpoint upload raised {type(exc).__name__}: {exc}")
        self.finish_report(p.n, p.dir_name, p.metrics, mine)

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
            return Upload(error=f"rank {rank} could not write its checkpoint into {dest}: {reason(exc)}")
        if delete_after:
            from ray.train.v2._internal.execution.storage import delete_fs_path

            try:
                delete_fs_path(checkpoint.filesystem, checkpoint.path)
            except Exception as exc:
                print(f"rtdebug: could not delete the local checkpoint {checkpoint.path}: {exc}", file=sys.stderr)
        return Upload(persisted)

    def finish_report(self, n: int, dir_name: str, metrics: list[dict[str, Any]], mine: Upload) -> None:
        op = REPORT + "/upload"
        if self.world.rank == 0:
            uploads: list[Upload] = self.exchange.meet(op, n, mine) or [mine]
        else:
            self.exchange.post(op, n, mine)
            uploads = []
        self.register(n, dir_name, metrics, uploads)

    def register_metrics(self, metrics: list[dict[str, Any]]) -> None:
        """A report without a checkpoint on any rank: rank 0's history counts it and the callbacks see every
        rank's metrics; the other ranks go on at once, as a cluster's workers do (the history is unchanged).
        A callback that raises fails rank 0, and torchrun ends the others."""
        if self.controller is not None:
            self.controller.after_report(None, metrics)

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
            snap = self.controller.snapshot(error, with_filesystem=False)
            self.exchange.publish(REPORT, n, snap)
        else:
            snap = self.exchange.answer(REPORT, n)
        snap.filesystem = self.filesystem
        self.snapshot = snap
        if snap.error:
            raise HarnessError(snap.error)

    def discard(self, dir_name: str) -> None:
        """A report that failed leaves nothing half-written: its directory goes, unless the history has it."""
        path = self.storage.build_checkpoint_path_from_name(dir_name)
        if any(p == path for p, _ in self.snapshot.history):
            return
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)

    def say(self, key: str, lines: list[str | None]) -> None:
        """This rank's line of ``lines`` (every rank's, ``notes``), once per ``fit()``: by the job's first
        rank to see it where every rank would say the same, else on each rank it is true of."""
        mine = lines[self.world.rank] if self.world.rank < len(lines) else None
        if mine is None or key in self.noted:
            return
        self.noted.add(key)
        if all(line == mine for line in lines):
            if self.exchange.first(key):
                notes.say(mine)
        else:
            notes.say(f"rank {self.world.rank}: {mine}")

    def note_once(self, key: str, line: str) -> None:
        if key not in self.noted and self.world.rank == 0:
            self.noted.add(key)
            print(f"rtdebug: {line}", file=sys.stderr, flush=True)


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


def _into(future: Future[Upload], work: Any) -> None:
    """Run ``work`` in this thread; its result or its exception goes to ``future``."""
    try:
        future.set_result(work())
    except BaseException as exc:
        future.set_exception(exc)


def _vanished(rank: int, checkpoint: Any) -> str:
    return f"rank {rank}'s checkpoint directory {checkpoint.path} does not exist (deleted before report()?)"
