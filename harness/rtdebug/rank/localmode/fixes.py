"""The Ray-local-mode and torch.distributed fixes a rank arms in itself (the environment it was
started with is ``rtdebug.common.rankenv``).

- A long default process-group timeout: Ray's ``LocalTorchController`` calls
  ``init_process_group`` with no timeout, so a rank paused at a breakpoint would
  make its peers time out (torch defaults: 10 min NCCL, 30 min others). We raise
  the *default* that call uses instead of creating the group ourselves (Ray
  asserts the group is not initialized).
- Ray's bare asserts and V1 errors in local mode become one clear line.
"""

from __future__ import annotations

import os
from datetime import timedelta

from rtdebug.common.errors import HarnessError
from rtdebug.common.imports import when_imported
from rtdebug.common.rankenv import FALSE, V2_VAR

RAY_DATA_ASSERT = "Ray Data is not supported in local mode with multiple workers."
RAY_DATA_MESSAGE = (
    "Ray Data (datasets=) is not supported in Ray's own local mode with more than one rank; "
    "drop --ray-local-mode=ray (rtdebug's default shards it), or load data with a torch DataLoader + "
    "DistributedSampler (ray.train.torch.prepare_data_loader)"
)
V2_OFF_MESSAGE = (
    f"the script set {V2_VAR}=0, but Ray Train local mode (num_workers=0) needs Ray Train V2; "
    f"remove that line or set {V2_VAR}=1"
)


def patch_default_timeouts(c10d, timeout_s: float) -> None:
    """Raise torch's default process-group timeouts (used when init_process_group gets none)."""
    td = timedelta(seconds=timeout_s)
    c10d.default_pg_timeout = td
    if getattr(c10d, "default_pg_nccl_timeout", None) is not None:
        c10d.default_pg_nccl_timeout = td


def install(pg_timeout_s: float) -> None:
    """Arm the fixes in this process; they apply when torch / ray.train are imported."""
    when_imported("torch.distributed.distributed_c10d", lambda m: patch_default_timeouts(m, pg_timeout_s))
    when_imported("ray.train.torch", _check_v2_at_import)


def _check_v2_at_import(_module) -> None:
    if os.environ.get(V2_VAR, "1").strip().lower() in FALSE:
        raise HarnessError(V2_OFF_MESSAGE)


def explain(exc: BaseException) -> str | None:
    """A one-line message for a known local-mode failure, or None for the user's own errors."""
    if isinstance(exc, HarnessError):
        return exc.message
    if isinstance(exc, AssertionError) and RAY_DATA_ASSERT in str(exc):
        return RAY_DATA_MESSAGE
    if isinstance(exc, ValueError) and "num_workers" in str(exc) and os.environ.get(V2_VAR) == "0":
        return V2_OFF_MESSAGE
    from rtdebug.rank.collectives import (
        mismatch as collectives,  # --check-collectives: torch's mismatch error in one line
    )

    return collectives.explain(exc)
