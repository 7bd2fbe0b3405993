"""``nonfinite`` around DDP's gradient all-reduce, with no comm hook and no per-bucket callback.

Why not a DDP comm hook: a Python hook replaces DDP's C++ all-reduce and runs its completion callback on
the communication thread, which must take the GIL from the thread running backward: on CPU that alone
cost ~18 % of a DDP step (bench/STOPON_RESULTS.md). Instead:

- **before the all-reduce** (origin): a post-accumulate-grad hook on each parameter, registered before
  DDP's own (so it runs before DDP copies the gradient into its bucket), keeps ``grad.mul(0).sum()``:
  0 for a finite gradient, NaN as soon as one element is NaN or Inf (exact, no overflow, one vectorised
  pass; ``isfinite(...).all()`` is ~25x slower on CPU); under FSDP2, the same of each reduce-scatter's
  input (``dist.reduce_scatter_single``), whose sharded gradients arrive already reduced;
- **after it** (every rank the same: DDP's sum spreads a NaN or Inf to every replica), the same per
  gradient once backward has returned;
- **the loss**: one small all-reduce per step, launched before backward and overlapped with it, of a
  world-size vector in which a rank marks a non-finite loss (a loss can be non-finite while the gradients
  are not: only this tells the other ranks);
- **on an event** (seen alike by every rank: a non-finite result, or a marked loss) one more small
  all-reduce of each rank's "before" flag names the origin ranks -- or none: an overflow in the reduction.

The names come from DDP's module (``named_parameters``, ``named_modules``); ``nonfinite:deep`` adds one
global forward hook that names the first module whose output went non-finite (one sync per module).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from rtdebug.common import log

_names: dict[int, str] = {}  # id(parameter) -> its name in a DDP module
_order: dict[int, int] = {}  # id(parameter) -> its place in the module's own order
_modules: dict[int, str] = {}  # id(module) -> its qualified name (for nonfinite:deep)
_params: dict[int, Any] = {}  # id(parameter) -> parameter, for the check after the all-reduce
_step: dict[str, Any] = {"pre": [], "deep": None, "vote": None}
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
    init = DDP.__init__

    @functools.wraps(init)
    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        watch(module)  # before DDP's init: our hooks run before DDP's own, on the local gradient
        init(self, module, *args, **kwargs)
        _group["pg"] = self.process_group

    DDP.__init__ = __init__
    DDP._rtdebug_stopon = True


def watch(module: Any) -> None:
    """Learn ``module``'s names and hook its parameters' gradients (once each)."""
    for i, (name, p) in enumerate(module.named_parameters()):
        _names[id(p)], _order[id(p)] = name, i
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


def adopt_existing() -> int:
    """DDP models made before ``--stop-on`` was set on a running rank: found once (``gc``) and watched."""
    import gc

    from torch.nn.parallel import DistributedDataParallel as DDP

    found = [o for o in gc.get_objects() if isinstance(o, DDP) and hasattr(o, "module")]  # not half-built
    for model in found:
        watch(model.module)
        _group["pg"] = model.process_group
    return len(found)


def enable(on: bool) -> None:
    """Whether ``nonfinite`` is armed (``arm`` says so each time the conditions change): hooks stay, idle."""
    _patched["on"] = on


def _local(t: Any) -> Any:
    """A DTensor's own shard (FSDP2, tensor parallel): a reduction of the DTensor itself would be a
    collective, which a check must never add; this rank's shard is what it computed."""
    local = getattr(t, "to_local", None)
    return local() if callable(local) else t


def _before(p: Any) -> None:
    # a DTensor's gradient arrives already reduce-scattered (FSDP2): "before" is FSDP's input (below)
    if _patched.get("on") and p.grad is not None and not hasattr(p.grad, "to_local"):
        _step["pre"].append((p, p.grad.detach().mul(0).sum()))


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
                _step["pre"].append((None, inp.detach().mul(0).sum()))
        return fn(*args, **kwargs)

    reduce_scatter_single._rtdebug_stopon = True  # type: ignore[attr-defined]
    dist.reduce_scatter_single = reduce_scatter_single


def _forward(module: Any, args: Any, output: Any) -> None:
    """nonfinite:deep -- the first module this step whose output is not finite."""
    if _step["deep"] is not None:
        return
    import torch

    t = output[0] if isinstance(output, (tuple, list)) and output else output
    if isinstance(t, torch.Tensor) and t.is_floating_point() and bool(t.detach().mul(0).sum().isnan()):
        _step["deep"] = _modules.get(id(module), type(module).__name__)


def _dist() -> tuple[Any, Any, list[int]] | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    pg = _group["pg"]
    members = dist.get_process_group_ranks(pg) if pg is not None else list(range(dist.get_world_size()))
    return dist, pg, members


def _reduce(dist: Any) -> Any:
    """torch's own all_reduce: not through the collective record, which keeps the user's collectives."""
    fn = dist.distributed_c10d.all_reduce
    return getattr(fn, "__wrapped__", fn) if getattr(fn, "__rtdebug_collrec__", False) else fn


def begin_backward(loss_bad: Any) -> None:
    """Before backward: the loss's flag goes to every rank, overlapped with backward."""
    _step["pre"] = []
    d = _dist()
    if d is None or loss_bad is None:
        _step["vote"] = None
        return
    import torch

    dist, pg, members = d
    v = torch.zeros(len(members), device=loss_bad.device)
    v[members.index(dist.get_rank())] = loss_bad.float()
    _step["vote"] = (v, _reduce(dist)(v, group=_vote_group(dist, pg, members), async_op=True))


def _vote_group(dist: Any, pg: Any, members: list[int]) -> Any:
    """A group of the same ranks for the vote alone, made at the first backward (every rank is there): on
    the job's own group, the vote would queue ahead of DDP's first bucket and delay it by a round trip."""
    key = tuple(members)
    if _group.get("vote_for") != key:
        try:
            _group["vote"] = dist.new_group(ranks=members)
        except Exception:
            log.swallowed("rank.stopon.ddp: no group of its own for the vote: it shares the job's")
            _group["vote"] = pg
        _group["vote_for"] = key
    return _group["vote"]


def end_backward(loss_bad: bool) -> dict[str, Any] | None:
    """After backward: this rank's findings, and the event every rank agrees on (None: nothing found)."""
    import torch

    pre = _step["pre"]
    _step["pre"] = []
    origin = None
    if pre and bool(torch.stack([s for _, s in pre]).isnan().any()):
        bad = sorted((p for p, s in pre if bool(s.isnan())), key=lambda p: _order.get(id(p), 1 << 30))
        first = "FSDP's reduce-scatter input" if bad[0] is None else _names.get(id(bad[0]), "a parameter")
        origin = first + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
    grads = [p.grad for p in _params.values() if p.grad is not None]
    post = bool(torch.stack([_local(g.detach()).mul(0).sum() for g in grads]).isnan().any()) if grads else False
    local = {"loss": loss_bad, "origin": origin, "post": post, "deep": _step["deep"]}
    _step["deep"] = None
    d, vote = _dist(), _step["vote"]
    _step["vote"] = None
    lossy: list[int] = []
    if d is not None and vote is not None:
        dist, pg, members = d
        v, work = vote
        work.wait()
        lossy = [members[i] for i in range(len(members)) if float(v[i]) > 0]
    if not (loss_bad or origin or post or lossy):
        return None
    origins = [0] if loss_bad or origin else []
    if d is not None and (post or lossy):  # every rank is here alike: name the origins
        dist, pg, members = d
        flags = torch.zeros(len(members))
        flags[members.index(dist.get_rank())] = float(bool(loss_bad or origin))
        _reduce(dist)(flags, group=pg)
        origins = [members[i] for i in range(len(members)) if float(flags[i]) > 0]
    return {"local": local, "origins": origins, "post": post}


def describe(event: dict[str, Any], step: int) -> tuple[str, bool]:
    """(this rank's stop reason, is it an origin)."""
    local, origins = event["local"], event["origins"]
    deep = f"; first non-finite output: {local['deep']}" if local.get("deep") else ""
    of = "in" if str(local["origin"]).startswith("FSDP") else "of"
    if local["loss"]:
        grad = f" and grad {of} {local['origin']}" if local["origin"] else ""
        return f"non-finite loss{grad} at step {step} (origin){deep}", True
    if local["origin"]:
        return f"non-finite grad {of} {local['origin']} at step {step} (origin){deep}", True
    who = ", ".join(str(r) for r in origins)
    if origins and event["post"]:
        return f"non-finite grad at step {step}: received in the all-reduce (origin: rank {who})", False
    if origins:
        return f"non-finite loss or grad on rank {who} at step {step}", False
    return f"non-finite grad after the all-reduce at step {step}: no rank had one before it (an overflow)", False
