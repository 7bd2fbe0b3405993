"""``--force-local``: run an unmodified ``num_workers=N`` script in Ray Train local mode.

The user debugs the script they will ship (``ScalingConfig(num_workers=4,
use_gpu=True)``) without editing it. The seam is the V2 trainer's ``__init__``
(``ray.train.v2.api.data_parallel_trainer.DataParallelTrainer``, the base of
every V2 trainer): its ``scaling_config`` is replaced by a copy with
``num_workers=0`` before Ray sees it. Patching ``ScalingConfig`` itself would
also rewrite configs Ray builds for its own use; the trainer is the one place
the user's choice becomes a run. The hook is armed by a post-import hook, so a
process that never imports Ray pays nothing.

Local mode ignores the placement options (GPUs, resources, strategy, labels):
the run says once which of them the script set. A V1 trainer (Ray Train V1 has
no local mode) gets one clear line instead of a Ray traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys

from rtdebug.common.errors import HarnessError
from rtdebug.common.imports import when_imported

V2_TRAINER_MODULE = "ray.train.v2.api.data_parallel_trainer"
V1_TRAINER_MODULE = "ray.train.data_parallel_trainer"
V1_MESSAGE = (
    "--force-local: {name} is a Ray Train V1 trainer, which has no local mode; "
    "use the V2 trainer (ray.train.torch.TorchTrainer with RAY_TRAIN_V2_ENABLED=1)"
)
# ScalingConfig fields local mode does not use, with the value that means "not set"
IGNORED = {
    "use_gpu": False,
    "resources_per_worker": None,
    "placement_strategy": "PACK",
    "label_selector": None,
    "accelerator_type": None,
    "use_tpu": False,
    "topology": None,
}

_said = False


def ignored_options(scaling_config) -> list[str]:
    """``name=value`` for each option the script set that local mode ignores."""
    out = []
    for name, unset in IGNORED.items():
        value = getattr(scaling_config, name, unset)
        if value != unset:
            out.append(f"{name}={value!r}")
    return out


def local_copy(scaling_config):
    """The same ScalingConfig with ``num_workers=0`` and the ignored options unset (so Ray's own
    checks, e.g. for GPUs or TPU topology, never run against options local mode does not use)."""
    changes = {name: unset for name, unset in IGNORED.items() if getattr(scaling_config, name, unset) != unset}
    return dataclasses.replace(scaling_config, num_workers=0, **changes)


def describe(before) -> str:
    ignored = ignored_options(before)
    line = (
        f"rtdebug: --force-local: ScalingConfig(num_workers={before.num_workers!r}) runs in local mode (num_workers=0)"
    )
    if ignored:
        line += "; local mode ignores " + ", ".join(ignored)
    return line


def _say(line: str) -> None:
    global _said
    if _said or os.environ.get("RANK", "0") not in ("", "0"):
        return
    _said = True
    print(line, file=sys.stderr, flush=True)


def _patch_v2(module) -> None:
    cls = module.DataParallelTrainer
    original = cls.__init__
    if getattr(original, "_rtdebug_force_local", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        sc = kwargs.get("scaling_config")
        if sc is None:
            from ray.train.v2.api.config import ScalingConfig

            sc = ScalingConfig()  # the trainer's own default is num_workers=1
        if sc.num_workers != 0:
            _say(describe(sc))
            kwargs["scaling_config"] = local_copy(sc)
        original(self, *args, **kwargs)

    __init__._rtdebug_force_local = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _patch_v1(module) -> None:
    cls = module.DataParallelTrainer
    original = cls.__init__
    if getattr(original, "_rtdebug_force_local", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        raise HarnessError(V1_MESSAGE.format(name=type(self).__name__))

    __init__._rtdebug_force_local = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def install() -> None:
    """Arm ``--force-local`` in this process (before the script runs)."""
    when_imported(V2_TRAINER_MODULE, _patch_v2)
    when_imported(V1_TRAINER_MODULE, _patch_v1)
