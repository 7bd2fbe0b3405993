"""``nonfinite`` after backward: did the step go wrong, do all the ranks that must stop together know it,
and who is the origin?

A collective of ours is only ever entered when every rank of its group is known to enter it too, else
the job would hang in it. So each backward is decided by what it synchronised (``ddp`` records that):

- **DDP, synchronised**: after DDP's all-reduce every replica holds the same gradients, bit for bit. A
  NaN or Inf on any rank (or a carried loss, see ``ddp``) is in all of them, so every replica sees the
  event alike, with no collective of ours on a clean step. Only then, one small all-reduce on DDP's group
  says who had it before (the origins; none: an overflow in the reduction), and puts the carrier's true
  value back (the mean of the ranks' own values, DDP's reduction);
- **FSDP2**: each rank holds only its shard of the reduced gradients, so a finding differs by rank: one
  small all-reduce on the reduce-scatter's group, every such backward, decides for all of them;
- **DDP ``no_sync``**: nothing reduced, nothing decided; a finding is carried to the step's synchronised
  backward, where every replica stops;
- **no gradient sync known** (a single process, or ranks that reduce nothing rtdebug knows): this rank
  stops alone, and says so.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.rank.stopon import ddp, finite

_state: dict[str, Any] = {"pending": None, "micro": 0}  # a no_sync micro-batch's finding, its index


def begin(loss: Any) -> Any:
    """Before backward: the loss's flag (kept on the device), and what this backward's carrier carries."""
    try:
        lf = finite.flag(loss)
    except Exception:  # not a tensor we can read: nothing to check
        log.swallowed("rank.stopon.agree: a loss that is no tensor we can read: nothing to check")
        lf = False
    s = ddp._step
    s["pre"], s["carrier"], s["fsdp"] = [], None, None
    s["carry"] = True if _state["pending"] is not None else lf
    return lf


def end(lf: Any, step: int) -> dict[str, Any] | None:
    """After backward: the event every rank that must stop with this one agrees on (None: none)."""
    s = ddp._step
    pre, carrier, sync, fsdp, deep, model = s["pre"], s["carrier"], s["sync"], s["fsdp"], s["deep"], s["model"]
    carried = s["carried"]
    if sync:
        ddp.learn_last(model)
    s.update(pre=[], carrier=None, sync=None, fsdp=None, deep=None, carry=False, carried=False, model=None)
    if sync and carrier is not None and carrier[2] == len(pre) and ddp.exact(model):
        posts = [finite.flag(carrier[0].grad.detach().view(-1)[:1])]  # the carrier says it all
    else:
        posts = _posts(model)
    # a clean step (the usual one) is read in one go: one wait for the device, none on CPU
    if fsdp is None and _state["pending"] is None and not finite.any_true([lf, *(f for _, f in pre), *posts]):
        _state["micro"] = _state["micro"] + 1 if sync is False else 0
        return None
    loss_bad, post = finite.truthy(lf), finite.any_true(posts)
    origin = _origin([(p, f) for p, f in pre]) if finite.any_true([f for _, f in pre]) else None
    mine = {"loss": loss_bad, "origin": origin, "post": post, "deep": deep, "pending": _state["pending"]}
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return _alone(mine, distributed=False)
    if sync:
        return _ddp(dist, sync, mine, (carrier, finite.truthy(carried), model, step))
    if fsdp is not None:
        return _vote(dist, fsdp[0], mine)
    if sync is False or ddp._group.get("fsdp"):  # a no_sync micro-batch: the step's synchronised backward decides
        if (loss_bad or origin) and _state["pending"] is None:
            _state["pending"] = (_what(mine), f"micro-batch {_state['micro']} under no_sync")
        _state["micro"] += 1
        return None
    return _alone(mine, distributed=True)


def _origin(pre: list[tuple[Any, Any]]) -> str:
    bad = sorted((p for p, f in pre if finite.truthy(f)), key=lambda p: ddp._order.get(id(p), 1 << 30))
    first = "FSDP's reduce-scatter input" if bad[0] is None else ddp._names.get(id(bad[0]), "a parameter")
    return first + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")


def _what(mine: dict[str, Any]) -> str:
    of = "in" if str(mine["origin"]).startswith("FSDP") else "of"
    if mine["loss"]:
        return "non-finite loss" + (f" and grad {of} {mine['origin']}" if mine["origin"] else "")
    return f"non-finite grad {of} {mine['origin']}"


def _alone(mine: dict[str, Any], distributed: bool) -> dict[str, Any] | None:
    if not (mine["loss"] or mine["origin"] or mine["post"]):
        return None
    _state["pending"], _state["micro"] = None, 0
    origins = [int(os.environ.get("RANK", "0") or 0)] if mine["loss"] or mine["origin"] else []
    return {"local": mine, "origins": origins, "kinds": {}, "via": "alone" if distributed else "local"}


def _reduce(dist: Any) -> Any:
    """torch's own all_reduce: not through the collective record, which keeps the user's collectives."""
    fn = dist.distributed_c10d.all_reduce
    return getattr(fn, "__wrapped__", fn) if getattr(fn, "__rtdebug_collrec__", False) else fn


def _posts(model: Any) -> list[Any]:
    """After the reduction: the flags of every gradient of this step's model (a shard's own, FSDP2)."""
    return [finite.flag(ddp.local(p.grad)) for p in ddp.watched(model) if p.grad is not None]


def _post(model: Any) -> bool:
    return finite.any_true(_posts(model))


def _ddp(dist: Any, pg: Any, mine: dict[str, Any], this: tuple[Any, bool, Any, int]) -> dict[str, Any] | None:
    carrier, poisoned, event_model, step = this  # the carrier, whether this rank set it, the model, the step
    carried = mine["loss"] or mine["pending"] is not None
    if not mine["post"]:
        if (carried or mine["origin"]) and carrier is None and mine["pending"] is None:
            # the carrier's gradient did not come this time (the graph changed): the next backward carries
            _state["pending"] = (_what(mine), f"step {step}, carried by the next backward")
            return None
        if carried or mine["origin"]:  # ours did not arrive (a comm hook that drops NaN): said, alone
            return _alone(mine, distributed=True)
        _state["micro"] = 0
        return None
    import torch

    # every replica is here alike (the same reduced gradients): one all-reduce names the origins
    members = dist.get_process_group_ranks(pg)
    me = members.index(dist.get_rank())
    dev = carrier[1].device if carrier is not None else torch.device("cpu")
    # per rank: origin (1: a gradient, 2: the loss alone), carried, the carrier's place and own value
    rows = torch.zeros(len(members), 4, dtype=torch.float64, device=dev)
    rows[me, 0] = 1.0 if mine["origin"] else (2.0 if carried else 0.0)
    rows[me, 1] = 1.0 if poisoned else 0.0
    if carrier is not None:
        rows[me, 2] = float(ddp._order.get(id(carrier[0]), -1) + 1)
        rows[me, 3] = carrier[1].double().reshape(())
    _reduce(dist)(rows, group=pg)
    table = rows.cpu().tolist()
    kinds = {members[i]: int(r[0]) for i, r in enumerate(table) if r[0] > 0}
    if any(r[1] for r in table) and carrier is not None:
        _restore(carrier, table, len(members))
        mine["post"] = _post(event_model)
    _state["pending"], _state["micro"] = None, 0
    return {"local": mine, "origins": sorted(kinds), "kinds": kinds, "via": "all-reduce"}


def _restore(carrier: Any, table: list[list[float]], n: int) -> None:
    """The carrier's element 0 back to what DDP would have made of it: the mean of the ranks' own values
    (the same element on every rank: DDP's replicas run the same backward, in the same order)."""
    p = carrier[0]
    if len({r[2] for r in table}) != 1 or table[0][2] == 0 or p.grad is None:
        print("rtdebug: --stop-on nonfinite: the ranks' first gradients differ: grad[0] left NaN", file=sys.stderr)
        return
    with_mean = sum(r[3] for r in table) / n
    p.grad.detach().view(-1)[:1].fill_(with_mean)


def _vote(dist: Any, group: Any, mine: dict[str, Any]) -> dict[str, Any] | None:
    """FSDP2: every rank of the reduce-scatter's group reduced in this backward; one all-reduce decides."""
    import torch

    members = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    me = members.index(dist.get_rank())
    rows = torch.zeros(len(members), 2, dtype=torch.float64)
    rows[me, 0] = 1.0 if mine["origin"] else (2.0 if mine["loss"] or mine["pending"] is not None else 0.0)
    rows[me, 1] = 1.0 if mine["post"] else 0.0
    if dist.get_backend(group) == "nccl":
        rows = rows.cuda()
    _reduce(dist)(rows, group=group)
    table = rows.cpu().tolist()
    if not any(r[0] or r[1] for r in table):
        _state["micro"] = 0
        return None
    _state["pending"], _state["micro"] = None, 0
    kinds = {members[i]: int(r[0]) for i, r in enumerate(table) if r[0] > 0}
    return {"local": mine, "origins": sorted(kinds), "kinds": kinds, "via": "reduce-scatter"}


def describe(event: dict[str, Any], step: int) -> tuple[str, bool]:
    """(this rank's stop reason, is it an origin)."""
    mine, kinds, via = event["local"], event["kinds"], event["via"]
    deep = f"; first non-finite output: {mine['deep']}" if mine.get("deep") else ""
    if mine["pending"] is not None:
        what, where = mine["pending"]
        return f"{what} at step {step} ({where}) (origin){deep}", True
    if mine["loss"] or mine["origin"]:
        alone = "; this rank alone: no gradient sync in this backward" if via == "alone" else ""
        return f"{_what(mine)} at step {step} (origin){alone}{deep}", True
    if not event["origins"]:
        if via == "local":
            return f"non-finite grad at step {step}", False
        return f"non-finite grad after the {via} at step {step}: no rank had one before it (an overflow)", False
    who = ", ".join(str(r) for r in event["origins"])
    if mine["post"] and any(k == 1 for k in kinds.values()):
        return f"non-finite grad at step {step}: received in the {via} (origin: rank {who})", False
    if all(k == 2 for k in kinds.values()):
        return f"non-finite loss on rank {who} at step {step}", False
    if all(k == 1 for k in kinds.values()):
        return f"non-finite grad on rank {who} at step {step}", False
    return f"non-finite loss or grad on rank {who} at step {step}", False
