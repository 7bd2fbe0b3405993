"""``nonfinite``: the checks on what DDP and FSDP already do, with no comm hook and no collective per step.

Why not a DDP comm hook: a Python hook replaces DDP's C++ all-reduce and runs its completion callback on
the communication thread, which must take the GIL from the thread running backward: on CPU that alone
cost ~18 % of a DDP step (bench/STOPON_RESULTS.md). Instead:

- **before the all-reduce** (origin): a post-accumulate-grad hook on each parameter runs before DDP
  copies the gradient into its bucket (torch runs a tensor's post-accumulate hooks inside its
  ``AccumulateGrad``, DDP's hook after it) and keeps ``finite.flag(grad)``; under FSDP2, the same of each
  reduce-scatter's input (``dist.reduce_scatter_single``), and the group it reduces over;
- **the carrier**: a finding must reach every replica in the same step, though a NaN that DDP spreads
  may land in any element, and a non-finite loss may come with finite gradients. Each gradient's
  element 0 carries it (``_carry``): on the rank that has it, set to NaN before DDP copies the gradient
  (its own non-finite flag; on the first gradient, also the loss's), so DDP's own all-reduce brings it
  to every replica -- no collective of ours on a clean step -- and the check after it reads one element
  per gradient, the same elements on every rank. Every rank keeps each element's own value; ``agree``
  puts the mean back once the event is known. Only where DDP's reduction is its own (``carries``);
  with a comm hook every gradient is read, and a loss alone is not carried;
- **which backward synchronises**: DDP's ``forward`` says so (``require_backward_grad_sync``, as DDP's own
  reducer decides): a ``no_sync`` micro-batch reduces nothing, so nothing is decided there.

``agree`` reads all of this after backward (``state.STATE``: the models known, held weakly, and this
backward). The names come from DDP's module (``named_parameters``, ``named_modules``); ``nonfinite:deep``
adds one global forward hook that names the first module whose output went non-finite (one check per module).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.rank.stopon import finite, reduction
from rtdebug.rank.stopon.stepstate import STATE


def name_of(p: Any) -> str | None:
    """The parameter's name in its DDP module (None: not one of a live model rtdebug has seen)."""
    known = STATE.names.get(p)
    return known[0] if known is not None else None


def order_of(p: Any) -> int:
    """The parameter's place in its module's own order (unknown ones last)."""
    known = STATE.names.get(p)
    return known[1] if known is not None else 1 << 30


def replica_group() -> Any:
    """The process group of the job's (last made) DDP module: its ranks hold replicas; None: none made."""
    return STATE.group


def patch(torch: Any, deep: bool = False) -> None:
    """Every DDP module made from now on tells us its names and group, and gets the "before" hooks."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if deep and not STATE.deep_hooked:
        from torch.nn.modules.module import register_module_forward_hook

        register_module_forward_hook(_forward)
        STATE.deep_hooked = True
    if getattr(DDP, "_rtdebug_stopon", False):
        return
    import torch.distributed as dist

    _wrap_reduce_scatter(dist)
    init, forward = DDP.__init__, DDP.forward

    @functools.wraps(init)
    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        watch(module, hooks=STATE.armed)
        init(self, module, *args, **kwargs)
        if STATE.armed:
            STATE.of_model[self] = [p for p in module.parameters() if p in STATE.params]
        STATE.group = self.process_group

    @functools.wraps(forward)
    def ddp_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if STATE.armed and torch.is_grad_enabled():  # (a no_grad forward prepares no backward)
            # DDP's reducer prepares a synchronised backward exactly when this holds
            step = STATE.step
            step.sync = self.process_group if self.require_backward_grad_sync else False
            step.model, step.carries = self, reduction.carries(self, STATE.builtin_hooked)
        return forward(self, *args, **kwargs)

    builtin = DDP._register_builtin_comm_hook

    @functools.wraps(builtin)
    def register_builtin(self: Any, *args: Any, **kwargs: Any) -> Any:
        STATE.builtin_hooked[self] = True  # a C++ hook (FP16_COMPRESS): not in DDP's _comm_hooks
        return builtin(self, *args, **kwargs)

    DDP.__init__, DDP.forward, DDP._register_builtin_comm_hook = __init__, ddp_forward, register_builtin
    DDP._rtdebug_stopon = True


def watch(module: Any, hooks: bool = True) -> None:
    """Learn ``module``'s names and (``nonfinite`` armed) hook its parameters' gradients (once each); a
    model made while ``nonfinite`` is off gets no hook (``configure`` hooks it when it is set later)."""
    for i, (name, p) in enumerate(module.named_parameters()):
        STATE.names[p] = (name, i)
        if hooks:
            hook(p)
    for name, m in module.named_modules():
        STATE.modules[m] = name or type(m).__name__


def hook(p: Any) -> None:
    if p in STATE.params or not getattr(p, "requires_grad", False):
        return
    try:
        p.register_post_accumulate_grad_hook(_before)
    except Exception as exc:  # never the job's failure: this parameter goes unchecked, said once
        log.swallowed("rank.stopon.ddp: never the job's failure: this parameter goes unchecked, said once")
        print(f"rtdebug: --stop-on nonfinite cannot watch a parameter's gradient: {exc}", file=sys.stderr)
        return
    STATE.params[p] = True


def watched(model: Any = None) -> list[Any]:
    """The parameters whose gradients the check after backward reads: the DDP module's that ran forward
    (another model's gradients are not this step's), else every watched one."""
    got = STATE.of_model.get(model) if model is not None else None
    return got if got is not None else list(STATE.params.keys())


def adopt_existing() -> int:
    """DDP models made before ``--stop-on`` was set on a running rank: found once (``gc``) and watched."""
    import gc

    from torch.nn.parallel import DistributedDataParallel as DDP

    found = [o for o in gc.get_objects() if isinstance(o, DDP) and hasattr(o, "module")]  # not half-built
    for model in found:
        watch(model.module)
        STATE.of_model[model] = [p for p in model.module.parameters() if p in STATE.params]
        STATE.group = model.process_group
    return len(found)


def enable(on: bool) -> None:
    """Whether ``nonfinite`` is armed (``arm`` says so each time the conditions change): hooks stay, idle."""
    STATE.armed = on


def local(t: Any) -> Any:
    """A DTensor's own shard (FSDP2, tensor parallel): a reduction of the DTensor itself would be a
    collective, which a check must never add; this rank's shard is what it computed."""
    local = getattr(t, "to_local", None)
    return local() if callable(local) else t


def _before(p: Any) -> None:
    # runs once per gradient per backward: kept to the least Python (bench/STOPON_RESULTS.md); never raises
    # a DTensor's gradient arrives already reduce-scattered (FSDP2): "before" is FSDP's input (below)
    g = p.grad
    step = STATE.step
    if g is None or not step.active or hasattr(g, "to_local"):
        return  # not inside a Tensor.backward of ours (torch.autograd.backward called directly): unchecked
    try:
        f = finite.flag(g)
        step.pre.append((p, f))
        if step.sync and step.carries:
            _carry(p, g, f)
    except Exception:
        log.swallowed("rank.stopon.ddp: a gradient's check failed: it goes unchecked, the job goes on")


def _carry(p: Any, g: Any, f: Any) -> None:
    """Each gradient's element 0 carries this rank's finding into DDP's all-reduce: set to NaN where its
    own flag is set (so the NaN lands where every replica looks), and on the first gradient where the
    step's carry is (a non-finite loss); its own value is kept for ``agree`` to put the mean back. A
    device flag is applied on the device, with no wait."""
    if not g.is_floating_point():
        return
    try:
        flat = g.detach().view(-1)
    except RuntimeError:  # not viewable as flat (strided, sparse): ``heads`` reads it whole, on every rank
        return
    saved = STATE.step.saved
    carry = f if saved else _or(f, STATE.step.carry)
    if flat.is_cpu:  # a Python float: the cheapest copy there is (a device value stays on the device)
        saved[id(p)] = (p, flat[0].item())
        if carry is True:
            flat[:1].fill_(float("nan"))
        return
    g0 = flat[:1]
    saved[id(p)] = (p, g0.clone())
    if carry is True:
        g0.fill_(float("nan"))
    elif carry is not False:
        import torch

        g0.copy_(torch.where(carry, float("nan"), g0))


def _or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    if a is False:
        return b
    return a if b is False else a | b


def heads(model: Any) -> list[Any]:
    """After the reduction, where ``carries``: the flag of each gradient's element 0 (a gradient that is
    not flat-viewable: whole), one stacked flag for all of them."""
    import torch

    firsts, whole = [], []
    for p in watched(model):
        g = p.grad
        if g is None:
            continue
        try:
            firsts.append(g.detach().view(-1)[0])
        except RuntimeError:
            whole.append(finite.flag(g))
    return ([finite.flag(torch.stack(firsts))] if firsts else []) + whole


def _wrap_reduce_scatter(dist: Any) -> None:
    """FSDP2 reduce-scatters its gradients through ``dist.reduce_scatter_single``: its input, before the
    reduction, is the "before" of a sharded job (each rank's own gradients, concatenated)."""
    fn = getattr(dist, "reduce_scatter_single", None)
    if fn is None or getattr(fn, "_rtdebug_stopon", False):
        return

    @functools.wraps(fn)
    def reduce_scatter_single(*args: Any, **kwargs: Any) -> Any:
        step = STATE.step
        if STATE.armed and step.active:
            inp = kwargs.get("input", args[1] if len(args) > 1 else None)
            if inp is not None:
                try:
                    step.pre.append((None, finite.flag(inp)))
                except Exception:
                    log.swallowed("rank.stopon.ddp: a reduce-scatter input's check failed: unchecked")
                step.fsdp = (kwargs.get("group", args[3] if len(args) > 3 else None),)
                STATE.fsdp_seen = True
        return fn(*args, **kwargs)

    reduce_scatter_single._rtdebug_stopon = True  # type: ignore[attr-defined]
    dist.reduce_scatter_single = reduce_scatter_single


def _forward(module: Any, args: Any, output: Any) -> None:
    """nonfinite:deep -- the first module this step whose output is not finite (a forward under no_grad,
    an evaluation, has no backward of ours to name it in: it is not looked at)."""
    if STATE.step.deep is not None:
        return
    import torch

    if not torch.is_grad_enabled():
        return
    t = output[0] if isinstance(output, (tuple, list)) and output else output
    if isinstance(t, torch.Tensor) and finite.truthy(finite.flag(t)):
        STATE.step.deep = STATE.modules.get(module, type(module).__name__)
