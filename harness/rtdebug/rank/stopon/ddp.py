"""``nonfinite``: the checks on what DDP and FSDP already do, with no comm hook and no collective per step.

Why not a DDP comm hook: a Python hook replaces DDP's C++ all-reduce and runs its completion callback on
the communication thread, which must take the GIL from the thread running backward: on CPU that alone
cost ~18 % of a DDP step (bench/STOPON_RESULTS.md). Instead:

- **before the all-reduce** (origin): a post-accumulate-grad hook on each parameter runs before DDP
  copies the gradient into its bucket (torch runs a tensor's post-accumulate hooks inside its
  ``AccumulateGrad``, DDP's hook after it) and keeps ``finite.flag(grad)``; under FSDP2, the same of each
  reduce-scatter's input (``dist.reduce_scatter_single``), and the group it reduces over;
- **the carrier**: a non-finite loss (or a finding of a ``no_sync`` micro-batch) must reach every replica
  in the same step, though the gradients may all be finite; and a NaN that DDP spreads may land in any
  gradient. The gradient that came last in the previous backward carries both: when it arrives, every
  other flag of this rank is known, and where the loss or any flag is set, its element 0 is set to NaN
  before DDP copies it. DDP's own all-reduce brings that NaN to every replica -- no collective of ours on
  a clean step -- and, where DDP's reduction is exact (``exact``), the check after it reads one element
  instead of every gradient. Every rank keeps that element's own value, and ``agree`` puts the true mean
  back once the event is known;
- **which backward synchronises**: DDP's ``forward`` says so (``require_backward_grad_sync``, as DDP's own
  reducer decides): a ``no_sync`` micro-batch reduces nothing, so nothing is decided there.

``agree`` reads all of this after backward. The names come from DDP's module (``named_parameters``,
``named_modules``); ``nonfinite:deep`` adds one global forward hook that names the first module whose
output went non-finite (one check per module).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.rank.stopon import finite

_names: dict[int, str] = {}  # id(parameter) -> its name in a DDP module
_order: dict[int, int] = {}  # id(parameter) -> its place in the module's own order
_modules: dict[int, str] = {}  # id(module) -> its qualified name (for nonfinite:deep)
_params: dict[int, Any] = {}  # id(parameter) -> parameter, for the check after the all-reduce
# this backward: the "before" flags, the carrier, the carry, DDP's sync group (None: no DDP forward; False:
# no_sync), FSDP's reduce-scatter group, the first non-finite module (deep)
_step: dict[str, Any] = {
    "pre": [], "carrier": None, "carry": False, "carried": False, "sync": None, "fsdp": None, "deep": None,
    "model": None,
}  # fmt: skip
_hooked: set[int] = set()  # id(DDP module) with a built-in (C++) comm hook
_last: dict[int, int] = {}  # id(DDP module) -> id(the parameter whose gradient came last): the carrier
_of_model: dict[int, list[Any]] = {}  # id(DDP module) -> its watched parameters (the check after its all-reduce)
_group: dict[str, Any] = {"pg": None}
_patched: dict[str, Any] = {}


def names() -> dict[int, str]:
    return _names


def replica_group() -> Any:
    """The process group of the job's (last made) DDP module: its ranks hold replicas; None: none made."""
    return _group["pg"]


def patch(torch: Any, deep: bool = False) -> None:
    """Every DDP module made from now on tells us its names and group, and gets the "before" hooks."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if deep and "deep" not in _patched:
        from torch.nn.modules.module import register_module_forward_hook

        register_module_forward_hook(_forward)
        _patched["deep"] = True
    if getattr(DDP, "_rtdebug_stopon", False):
        return
    import torch.distributed as dist

    _wrap_reduce_scatter(dist)
    init, forward = DDP.__init__, DDP.forward

    @functools.wraps(init)
    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        watch(module, hooks=bool(_patched.get("on")))
        init(self, module, *args, **kwargs)
        if _patched.get("on"):
            _of_model[id(self)] = [p for p in module.parameters() if id(p) in _params]
        _group["pg"] = self.process_group

    @functools.wraps(forward)
    def ddp_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _patched.get("on"):  # DDP's reducer prepares a synchronised backward exactly when this holds
            sync = torch.is_grad_enabled() and self.require_backward_grad_sync
            _step["sync"], _step["model"] = (self.process_group if sync else False), self
        return forward(self, *args, **kwargs)

    builtin = DDP._register_builtin_comm_hook

    @functools.wraps(builtin)
    def register_builtin(self: Any, *args: Any, **kwargs: Any) -> Any:
        _hooked.add(id(self))  # a C++ hook (FP16_COMPRESS): not in DDP's _comm_hooks
        return builtin(self, *args, **kwargs)

    DDP.__init__, DDP.forward, DDP._register_builtin_comm_hook = __init__, ddp_forward, register_builtin
    DDP._rtdebug_stopon = True


def watch(module: Any, hooks: bool = True) -> None:
    """Learn ``module``'s names and (``nonfinite`` armed) hook its parameters' gradients (once each); a
    model made while ``nonfinite`` is off gets no hook (``configure`` hooks it when it is set later)."""
    for i, (name, p) in enumerate(module.named_parameters()):
        _names[id(p)], _order[id(p)] = name, i
        if hooks:
            hook(p)
    for name, m in module.named_modules():
        _modules[id(m)] = name or type(m).__name__


def hook(p: Any) -> None:
    if id(p) in _params or not getattr(p, "requires_grad", False):
        return
    try:
        p.register_post_accumulate_grad_hook(_before)
    except Exception as exc:  # never the job's failure: this parameter goes unchecked, said once
        log.swallowed("rank.stopon.ddp: never the job's failure: this parameter goes unchecked, said once")
        print(f"rtdebug: --stop-on nonfinite cannot watch a parameter's gradient: {exc}", file=sys.stderr)
        return
    _params[id(p)] = p


def watched(model: Any = None) -> list[Any]:
    """The parameters whose gradients the check after backward reads: the DDP module's that ran forward
    (another model's gradients are not this step's), else every watched one."""
    got = _of_model.get(id(model)) if model is not None else None
    return got if got is not None else list(_params.values())


def adopt_existing() -> int:
    """DDP models made before ``--stop-on`` was set on a running rank: found once (``gc``) and watched."""
    import gc

    from torch.nn.parallel import DistributedDataParallel as DDP

    found = [o for o in gc.get_objects() if isinstance(o, DDP) and hasattr(o, "module")]  # not half-built
    for model in found:
        watch(model.module)
        _of_model[id(model)] = [p for p in model.module.parameters() if id(p) in _params]
        _group["pg"] = model.process_group
    return len(found)


def enable(on: bool) -> None:
    """Whether ``nonfinite`` is armed (``arm`` says so each time the conditions change): hooks stay, idle."""
    _patched["on"] = on


def local(t: Any) -> Any:
    """A DTensor's own shard (FSDP2, tensor parallel): a reduction of the DTensor itself would be a
    collective, which a check must never add; this rank's shard is what it computed."""
    local = getattr(t, "to_local", None)
    return local() if callable(local) else t


def _before(p: Any) -> None:
    # runs once per gradient per backward: kept to the least Python (bench/STOPON_RESULTS.md)
    # a DTensor's gradient arrives already reduce-scattered (FSDP2): "before" is FSDP's input (below)
    g = p.grad
    if g is None or not _patched.get("on") or hasattr(g, "to_local"):
        return
    step = _step
    pre = step["pre"]
    pre.append((p, finite.flag(g)))
    model = step["model"]
    if model is not None and step["carrier"] is None and step["sync"]:
        last = _last.get(id(model))
        if id(p) == last or last is None:  # the first backward: the first gradient carries the loss alone
            _carry(p, g, [f for _, f in pre])


def _carry(p: Any, g: Any, flags: list[Any]) -> None:
    """This gradient -- the last of the previous backward, so every other gradient's flag is known by
    now -- carries the step's carry and this rank's "before" flags: its element 0 is kept, and set to
    NaN where either is set (a device flag is applied on the device, with no wait)."""
    if not g.is_floating_point():
        return
    try:
        g0 = g.detach().view(-1)[:1]
    except RuntimeError:  # not viewable as flat (a strided gradient): nothing carries; the full check does
        return
    _step["carrier"] = (p, g0.clone(), len(flags))
    carry = _step["carry"]
    bad = carry is True or finite.any_true([f for f in flags if isinstance(f, bool)])
    if bad:
        g0.fill_(float("nan"))
        _step["carried"] = True
        return
    device = [f for f in flags if not isinstance(f, bool)] + ([carry] if carry is not False else [])
    if device:
        import torch

        flag = torch.stack(device).any()
        g0.copy_(torch.where(flag, float("nan"), g0))
        _step["carried"] = flag


def exact(model: Any) -> bool:
    """Whether ``model``'s reduction cannot make a NaN or Inf of finite gradients: DDP's own all-reduce
    divides each gradient by the world size before summing (``|mean| <= max |g|``); a comm hook (fp16/bf16
    compression, mixed precision, the user's own) may overflow, so then every gradient is read."""
    return model is not None and not getattr(model, "_comm_hooks", True) and id(model) not in _hooked


def learn_last(model: Any) -> None:
    """The gradient that arrived last in this backward carries in the next (the same graph, the same
    order; when it changes, that backward falls back to reading every gradient)."""
    pre = _step["pre"]
    if model is not None and pre and pre[-1][0] is not None:
        _last[id(model)] = id(pre[-1][0])


def _wrap_reduce_scatter(dist: Any) -> None:
    """FSDP2 reduce-scatters its gradients through ``dist.reduce_scatter_single``: its input, before the
    reduction, is the "before" of a sharded job (each rank's own gradients, concatenated)."""
    fn = getattr(dist, "reduce_scatter_single", None)
    if fn is None or getattr(fn, "_rtdebug_stopon", False):
        return

    @functools.wraps(fn)
    def reduce_scatter_single(*args: Any, **kwargs: Any) -> Any:
        if _patched.get("on"):
            inp = kwargs.get("input", args[1] if len(args) > 1 else None)
            if inp is not None:
                _step["pre"].append((None, finite.flag(inp)))
                _step["fsdp"] = (kwargs.get("group", args[3] if len(args) > 3 else None),)
                _group["fsdp"] = True
        return fn(*args, **kwargs)

    reduce_scatter_single._rtdebug_stopon = True  # type: ignore[attr-defined]
    dist.reduce_scatter_single = reduce_scatter_single


def _forward(module: Any, args: Any, output: Any) -> None:
    """nonfinite:deep -- the first module this step whose output is not finite."""
    if _step["deep"] is not None:
        return
    import torch

    t = output[0] if isinstance(output, (tuple, list)) and output else output
    if isinstance(t, torch.Tensor) and finite.truthy(finite.flag(t)):
        _step["deep"] = _modules.get(id(module), type(module).__name__)
