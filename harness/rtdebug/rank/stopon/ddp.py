"""``nonfinite`` in DDP's gradient buckets, and the per-step vote that tells every rank the same event.

A comm hook is the one place DDP lets code see a bucket before and after its all-reduce. ``patch`` makes
every ``DistributedDataParallel`` register ours at construction; a user's own ``register_comm_hook`` (or
builtin hook) then becomes the inner hook ours wraps, so both run. Per bucket: ``isfinite`` of the flat
buffer (one fused reduction; its mask is kept only until the all-reduce is done) before the all-reduce,
and once more on the result in the future's callback. No value is read before the all-reduce has
completed, so on a GPU the check's sync is where the all-reduce already waits.

The origin's parameter is named from the kept mask (the first non-finite element's bucket offset), with
the names DDP's module gives its parameters. ``nonfinite:deep`` adds one global forward hook that names
the first module whose output went non-finite this step (one sync per module: opt-in).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

_names: dict[int, str] = {}  # id(parameter) -> its name in a DDP module
_order: dict[int, int] = {}  # id(parameter) -> its place in the module's own order
_modules: dict[int, str] = {}  # id(module) -> its qualified name (for nonfinite:deep)
_step: dict[str, Any] = {"origin": None, "post": None, "deep": None}
_group: dict[str, Any] = {"pg": None}
_patched: dict[str, Any] = {}


def names() -> dict[int, str]:
    return _names


def replica_group() -> Any:
    """The process group of the job's (last made) DDP module: its ranks hold replicas; None: none made."""
    return _group["pg"]


def patch(torch: Any, deep: bool = False) -> None:
    """Every DDP module made from now on gets our comm hook (it checks buckets only while ``nonfinite`` is
    armed) and tells us its parameter names and group."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if deep and "deep" not in _patched:
        from torch.nn.modules.module import register_module_forward_hook

        register_module_forward_hook(_forward)
        _patched["deep"] = True
    if getattr(DDP, "_rtdebug_stopon", False):
        return
    init, register, builtin = DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook
    _patched["register"] = register

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        from rtdebug.rank.stopon import arm

        setup(self, hook=arm.armed_nonfinite())  # disagree alone keeps DDP's own C++ all-reduce

    @functools.wraps(register)
    def register_comm_hook(self: Any, state: Any, hook: Any) -> None:
        mine = getattr(self, "_rtdebug_hook", None)
        if mine is None:
            return register(self, state, hook)
        mine.inner = (state, hook)  # the user's hook runs inside ours

    @functools.wraps(builtin)
    def _register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        mine = getattr(self, "_rtdebug_hook", None)
        if mine is None:
            return builtin(self, comm_hook_type)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = default_hooks.fp16_compress_hook if "FP16" in str(comm_hook_type) else default_hooks.allreduce_hook
        mine.inner = (self.process_group, hook)

    DDP.__init__, DDP.register_comm_hook = __init__, register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook
    DDP._rtdebug_stopon = True


def setup(model: Any, hook: bool = True) -> None:
    """Learn ``model``'s parameter names and group, and (``hook``) put our comm hook on it."""
    _group["pg"] = model.process_group
    for i, (name, p) in enumerate(model.module.named_parameters()):
        _names[id(p)], _order[id(p)] = name, i
    for name, m in model.module.named_modules():
        _modules[id(m)] = name or type(m).__name__
    if not hook:
        return
    try:
        import torch
        import torch.distributed as dist

        # DDP checks a hook's annotations as objects (this module's are strings: __future__)
        _checked.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
        state = Hook(model.process_group)
        _patched["register"](model, state, _checked)
        model._rtdebug_hook = state
    except Exception as exc:  # never the job's failure (a user hook set before us, say): it trains on, unchecked
        print(f"rtdebug: --stop-on nonfinite cannot check this DDP model's buckets: {exc}", file=sys.stderr)


def adopt_existing(check: bool = True) -> int:
    """DDP models made before ``--stop-on`` was set on a running rank: found once (``gc``), set up."""
    import gc

    from torch.nn.parallel import DistributedDataParallel as DDP

    found = [o for o in gc.get_objects() if isinstance(o, DDP) and not hasattr(o, "_rtdebug_hook")]
    for model in found:
        setup(model, hook=check)
    return len(found)


class Hook:
    """The comm hook's state: the group, and the inner hook (DDP's own all-reduce unless the user set one)."""

    def __init__(self, pg: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.inner: tuple[Any, Any] = (pg, default_hooks.allreduce_hook)


def _checked(state: Hook, bucket: Any) -> Any:
    import torch

    from rtdebug.rank.stopon import arm

    if not arm.armed_nonfinite():
        return state.inner[1](state.inner[0], bucket)
    mask = torch.isfinite(bucket.buffer())
    pre_ok = mask.all()
    inner_state, inner = state.inner
    fut = inner(inner_state, bucket)

    def after(f: Any) -> Any:
        out = f.value()
        t = out[0] if isinstance(out, list) else out
        try:
            if not bool(pre_ok) and _step["origin"] is None:
                _step["origin"] = _first_bad(bucket, mask)
            if not bool(torch.isfinite(t).all()) and _step["post"] is None:
                _step["post"] = bucket.index()
        except Exception:  # the check never breaks the job's all-reduce
            pass
        return out

    return fut.then(after)


def _first_bad(bucket: Any, mask: Any) -> str:
    """The non-finite parameters of the bucket, first in the module's own order (DDP fills buckets in
    reverse): ``fc1.weight`` or ``fc1.weight (+3 more)``. Runs only when a bucket was non-finite."""
    bad, offset = [], 0
    for p, g in zip(bucket.parameters(), bucket.gradients(), strict=False):
        n = g.numel()
        if not bool(mask[offset : offset + n].all()):
            bad.append(p)
        offset += n
    if not bad:
        return "a parameter"
    bad.sort(key=lambda p: _order.get(id(p), 1 << 30))
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    return _names.get(id(bad[0]), "a parameter") + more


def _forward(module: Any, args: Any, output: Any) -> None:
    """nonfinite:deep -- the first module this step whose output is not finite."""
    if _step["deep"] is not None:
        return
    import torch

    t = output[0] if isinstance(output, (tuple, list)) and output else output
    if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
        _step["deep"] = _modules.get(id(module), type(module).__name__)


def begin_backward() -> None:
    _step["origin"] = _step["post"] = None


def end_backward(loss_bad: bool) -> dict[str, Any]:
    """This rank's findings for the backward that just ended (and the forward before it)."""
    found = {"loss": loss_bad, "origin": _step["origin"], "post": _step["post"], "deep": _step["deep"]}
    _step["origin"] = _step["post"] = _step["deep"] = None
    return found


def vote(local: dict[str, Any]) -> dict[str, Any] | None:
    """Every rank's findings, the same on every rank: one all-reduce of a world-size vector (each rank marks
    itself an origin; one slot says a bucket was non-finite after its all-reduce). None: nothing found."""
    origin = bool(local["loss"] or local["origin"])
    post = local["post"] is not None
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return {"origins": [0] if origin else [], "post": post} if origin or post else None
    import torch

    pg = _group["pg"]
    members = dist.get_process_group_ranks(pg) if pg is not None else list(range(dist.get_world_size()))
    v = torch.zeros(len(members) + 1)
    me = members.index(dist.get_rank())
    v[me], v[-1] = float(origin), float(post)
    reduce = dist.distributed_c10d.all_reduce
    reduce = getattr(reduce, "__wrapped__", reduce) if getattr(reduce, "__rtdebug_collrec__", False) else reduce
    reduce(v, group=pg)  # not through the collective record: it keeps the user's own collectives
    if not v.any():
        return None
    return {"origins": [members[i] for i in range(len(members)) if v[i] > 0], "post": bool(v[-1] > 0)}


def describe(event: dict[str, Any], local: dict[str, Any], step: int) -> tuple[str, bool]:
    """(this rank's stop reason, is it an origin)."""
    origins = event["origins"]
    deep = f"; first non-finite output: {local['deep']}" if local.get("deep") else ""
    if local["loss"]:
        grad = f" and grad of {local['origin']}" if local["origin"] else ""
        return f"non-finite loss{grad} at step {step} (origin){deep}", True
    if local["origin"]:
        return f"non-finite grad of {local['origin']} at step {step} (origin){deep}", True
    who = ", ".join(str(r) for r in origins)
    if origins and event["post"]:
        return f"non-finite grad at step {step}: received in the all-reduce (origin: rank {who})", False
    if origins:
        return f"non-finite loss or grad on rank {who} at step {step}", False
    return f"non-finite grad after the all-reduce at step {step}: no rank had one before it (an overflow)", False
