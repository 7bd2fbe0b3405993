"""The environment every debugged process gets, decided before it starts (launcher side).

- ``RAY_TRAIN_V2_ENABLED=1`` unless the user set it: Ray Train local mode is V2-only.
- NCCL's heartbeat monitor would kill a job whose collectives stall behind a paused rank,
  so GPU runs get ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` raised to the process-group timeout.

What a rank arms in itself at import time (the default timeout patch) is ``rtdebug.rank.localmode.fixes``.
"""

from __future__ import annotations

from collections.abc import Mapping

from rtdebug.common.errors import usage

V2_VAR = "RAY_TRAIN_V2_ENABLED"
DEFAULT_PG_TIMEOUT_S = 2 * 3600.0
FALSE = ("0", "false", "no", "off")


def ray_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment additions for Ray local mode; rejects an explicit V2=0."""
    value = env.get(V2_VAR)
    if value is None:
        return {V2_VAR: "1"}
    if value.strip().lower() in FALSE:
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
