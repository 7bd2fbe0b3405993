"""What ``rtdebug run`` arms in the driver so that Ray Train workers (``num_workers > 0``) get endpoints.

The driver keeps its own endpoint on ``--port``; workers listen on
``--debug-port-base + world rank`` (default: the port after the driver's). All
it takes is environment for this process: ``RAY_TRAIN_CALLBACKS`` names
``rtdebug.rank.ray_worker.RtdebugCallback`` (kept after any callbacks the user
named), and the ``RTDEBUG_*`` settings the callback reads once in the driver and
carries to the workers pickled. Nothing here imports Ray: a local-mode run
never pays for it, and Ray ignores the callback when ``num_workers == 0``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rtdebug.common.config import WORKER_PORT_BASE_VAR, RankConfig
from rtdebug.common.errors import usage
from rtdebug.common.ports import MAX_PORT

CALLBACKS_VAR = "RAY_TRAIN_CALLBACKS"
CALLBACK_PATH = "rtdebug.rank.ray_worker.RtdebugCallback"


def worker_port_base(driver_port: int, given: int | None) -> int:
    base = driver_port + 1 if given is None else given
    if not 1 <= base <= MAX_PORT:
        raise usage(f"--debug-port-base {base} must be within 1-{MAX_PORT}")
    return base


def driver_env(
    cfg: RankConfig,
    script: str,
    driver_port: int,
    port_base: int | None,
    ray_address: str | None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment additions for the driver process of ``rtdebug run``."""
    env = os.environ if env is None else env
    out = cfg.to_env()
    out.pop("RTDEBUG_PORT_BASE", None)  # the driver's own port; workers use their own base
    out[WORKER_PORT_BASE_VAR] = str(worker_port_base(driver_port, port_base))
    out["RTDEBUG_SCRIPT"] = script
    names = [c.strip() for c in env.get(CALLBACKS_VAR, "").split(",") if c.strip()]
    if CALLBACK_PATH not in names:
        names.append(CALLBACK_PATH)
    out[CALLBACKS_VAR] = ",".join(names)
    if ray_address:
        out["RAY_ADDRESS"] = ray_address
    return out


def session_fields(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The driver's session entry records the cluster address when it is known up front."""
    env = os.environ if env is None else env
    address = env.get("RAY_ADDRESS", "")
    return {"ray_address": address} if address and "://" not in address and address != "auto" else {}
