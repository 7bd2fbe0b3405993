"""Does a DDP model's gradient reduction leave every replica alike? What ``agree`` may do after it rests on
this: a collective of ours only when every replica ends backward with the same gradients (``symmetric``),
findings carried in DDP's own all-reduce only where nothing but DDP reduces (``carries``). Both read the
model's own configuration, the same on every rank.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

# comm hooks whose result is one all-reduce over DDP's whole group: every replica ends with the same
# gradients, as with DDP's own (their module, their name)
_FULL_GROUP_HOOKS = (
    {
        ("torch.distributed.algorithms.ddp_comm_hooks.default_hooks", n)
        for n in ("allreduce_hook", "fp16_compress_hook", "bf16_compress_hook")
    }
    | {
        ("torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook", n)
        for n in ("powerSGD_hook", "batched_powerSGD_hook")
    }
    | {("torch.distributed.algorithms.ddp_comm_hooks.mixed_precision_hooks", "_reducer_allreduce_and_upcast_hook")}
)


def _joining(model: Any) -> bool:
    config = getattr(model, "_join_config", None)
    return bool(getattr(config, "enable", False))


def carries(model: Any, builtin_hooked: Container[Any] = ()) -> bool:
    """Whether this model's backward carries findings in element 0 (``_carry``) and the check after it
    reads one element per gradient: DDP's own reduction only -- it divides each gradient by the world
    size before summing, so finite gradients stay finite and a carried NaN reaches every replica. A comm
    hook (compression may overflow, PowerSGD keeps an error buffer) or DDP's ``join()`` (joined ranks only
    shadow DDP's collectives) turns it off; so does a built-in (C++) comm hook, which DDP's ``_comm_hooks``
    does not list (``builtin_hooked``: the models that registered one). The same on every rank: the model's
    own configuration."""
    return (
        model is not None
        and not getattr(model, "_comm_hooks", True)
        and model not in builtin_hooked
        and not _joining(model)
    )


def symmetric(model: Any) -> bool:
    """Whether every replica ends this backward with the same gradients, bit for bit -- the condition for
    a collective of ours after it: DDP's own reduction, or a comm hook that all-reduces over the whole
    group; not under ``join()``, nor with a hook that reduces over part of it (post-local SGD) or not at
    all (``noop_hook``), where a finding differs by rank."""
    if model is None or _joining(model):
        return False
    hooks = getattr(model, "_comm_hooks", None)
    if hooks is None:
        return False
    return all((getattr(h, "__module__", ""), getattr(h, "__name__", "")) in _FULL_GROUP_HOOKS for h, _ in hooks)
