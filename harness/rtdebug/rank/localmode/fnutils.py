"""The ``TrainFnUtils`` the train function's ``ray.train.*`` calls reach under the cluster's semantics.

A subclass of Ray's ``LocalTrainFnUtils`` (Ray's local controller and its helpers test for it), whose
every call goes to this rank's ``LocalRun`` (``controller``): the calls that meet the other ranks, the
history rank 0 keeps, and the run's storage for ``get_context().get_storage()``.
"""

from __future__ import annotations

from typing import Any

from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils
from ray.train.v2.api.context import LocalTrainContext
from ray.train.v2.api.report_config import CheckpointConsistencyMode, CheckpointUploadMode


class StorageTrainContext(LocalTrainContext):
    """Local mode's context, with the run's storage (Ray's own raises ``NotImplementedError``)."""

    def __init__(self, storage: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rtdebug_storage = storage

    def get_storage(self) -> Any:
        return self._rtdebug_storage


class ClusterTrainFnUtils(LocalTrainFnUtils):
    def __init__(self, run: Any, dataset_shards: dict[str, Any] | None) -> None:
        w = run.world
        where = dict(
            experiment_name=run.run_config.name,
            world_size=w.size,
            world_rank=w.rank,
            local_rank=w.local_rank,
            local_world_size=w.local_size,
            node_rank=w.node_rank,
        )
        super().__init__(dataset_shards=dataset_shards, **where)
        self._context = StorageTrainContext(run.storage, **where)  # Ray's, with the storage (see above)
        self.run = run

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Any = None,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Any = None,
        validation: Any = False,
    ) -> None:
        self._last_metrics = metrics
        self.run.report(
            metrics,
            checkpoint,
            checkpoint_dir_name,
            checkpoint_upload_mode,
            bool(delete_local_checkpoint_after_upload),
            checkpoint_upload_fn,
            validation,
        )

    def get_checkpoint(self) -> Any:
        return self.run.get_checkpoint()

    def get_all_reported_checkpoints(
        self,
        consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
        timeout_s: float | None = None,
    ) -> list[Any]:
        return self.run.reported_checkpoints()

    def barrier(self) -> None:
        self.run.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        return self.run.broadcast_from_rank_zero(data)
