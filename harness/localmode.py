"""The Ray-local-mode and torch.distributed fixes every debugged process gets.

- ``RAY_TRAIN_V2_ENABLED=1`` unless the user set it: local mode is V2-only.
- A long default process-group timeout: Ray's ``LocalTorchController`` calls
  ``init_process_group`` with no timeout, so a rank paused at a breakpoint would
  make its peers time out (torch defaults: 10 min NCCL, 30 min others). We raise
  the *default* that call uses instead of creating the group ourselves (Ray
  asserts the group is not initialized).
- NCCL's heartbeat monitor would kill a job whose collectives stall, so GPU
  runs get ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` raised to the same timeout.
- Ray's bare asserts and V1 errors in local mode become one clear line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta

from harness.errors import HarnessError, usage
from harness.imports import when_imported

V2_VAR = "RAY_TRAIN_V2_ENABLED"
DEFAULT_PG_TIMEOUT_S = 2 * 3600.0
RAY_DATA_ASSERT = "Ray Data is not supported in local mode with multiple workers."
RAY_DATA_MESSAGE = (
    "Ray Data (datasets=) is not supported in local mode with more than one rank; "
    "load data with a torch DataLoader + DistributedSampler (ray.train.torch.prepare_data_loader) instead"
)
V2_OFF_MESSAGE = (
    f"the script set {V2_VAR}=0, but Ray Train local mode (num_workers=0) needs Ray Train V2; "
    f"remove that line or set {V2_VAR}=1"
)


def ray_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment additions for Ray local mode; rejects an explicit V2=0."""
    value = env.get(V2_VAR)
    if value is None:
        return {V2_VAR: "1"}
    if value.strip().lower() in ("0", "false", "no", "off"):
        raise usage(f"{V2_VAR}={value} is set, but Ray Train local mode needs Ray Train V2; unset it or set it to 1")
    return {}


def nccl_env(timeout_s: float, cuda_available: bool, env: Mapping[str, str]) -> dict[str, str]:
    """NCCL watchdog/heartbeat settings for a GPU run; nothing on CPU, never overriding the user."""
    if not cuda_available:
        return {}
    out = {}
    if "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" not in env:
        out["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] = str(int(timeout_s))
    return out


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
    if os.environ.get(V2_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        raise HarnessError(V2_OFF_MESSAGE)


def explain(exc: BaseException) -> str | None:
    """A one-line message for a known local-mode failure, or None for the user's own errors."""
    if isinstance(exc, HarnessError):
        return exc.message
    if isinstance(exc, AssertionError) and RAY_DATA_ASSERT in str(exc):
        return RAY_DATA_MESSAGE
    if isinstance(exc, ValueError) and "num_workers" in str(exc) and os.environ.get(V2_VAR) == "0":
        return V2_OFF_MESSAGE
    from harness import collectives  # --check-collectives: torch's mismatch error in one line

    return collectives.explain(exc)
