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
from rtdebug.rank.stopon import ddp, finite, reduction
from rtdebug.rank.stopon.stepstate import STATE


def begin(loss: Any) -> Any:
    """Before backward: the loss's flag (kept on the device), and what this backward's carrier carries."""
    try:
        lf = finite.flag(loss)
    except Exception:  # not a tensor we can read: nothing to check
        log.swallowed("rank.stopon.agree: a loss that is no tensor we can read: nothing to check")
        lf = False
    STATE.step.begin(carry=True if STATE.pending is not None else lf)
    return lf


def abandon() -> None:
    """The job's backward raised: this step is not ours to decide."""
    STATE.step.reset()


def end(lf: Any, step: int) -> dict[str, Any] | None:
    """After backward: the event every rank that must stop with this one agrees on (None: none)."""
    s = STATE.step
    pre, saved, sync, fsdp, deep, model = s.pre, s.saved, s.sync, s.fsdp, s.deep, s.model
    carries = bool(sync) and s.carries
    s.reset()
    # where DDP's own reduction carried the findings, one element per gradient says it all (``ddp``)
    posts = ddp.heads(model) if carries else _posts(model)
    # a clean step (the usual one) is read in one go: one wait for the device, none on CPU
    if fsdp is None and STATE.pending is None and not finite.any_true([lf, *(f for _, f in pre), *posts]):
        STATE.micro = STATE.micro + 1 if sync is False else 0
        return None
    loss_bad, post = finite.truthy(lf), finite.any_true(posts)
    origin = _origin([(p, f) for p, f in pre]) if finite.any_true([f for _, f in pre]) else None
    mine = {"loss": loss_bad, "origin": origin, "post": post, "deep": deep, "pending": STATE.pending}
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return _alone(mine, distributed=False)
    if sync and reduction.symmetric(model):
        return _ddp(dist, sync, mine, (saved if carries else None, model))
    if fsdp is not None:
        return _vote(dist, fsdp[0], mine)
    if sync is False or (sync is None and STATE.fsdp_seen):  # a no_sync micro-batch: the synchronised one decides
        if (loss_bad or origin) and STATE.pending is None:
            STATE.pending = (_what(mine), f"micro-batch {STATE.micro} under no_sync")
        STATE.micro += 1
        return None
    return _alone(mine, distributed=True)


def _origin(pre: list[tuple[Any, Any]]) -> str:
    bad = sorted((p for p, f in pre if finite.truthy(f)), key=ddp.order_of)
    first = "FSDP's reduce-scatter input" if bad[0] is None else (ddp.name_of(bad[0]) or "a parameter")
    return first + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")


def _what(mine: dict[str, Any]) -> str:
    of = "in" if str(mine["origin"]).startswith("FSDP") else "of"
    if mine["loss"]:
        return "non-finite loss" + (f" and grad {of} {mine['origin']}" if mine["origin"] else "")
    return f"non-finite grad {of} {mine['origin']}"


def _alone(mine: dict[str, Any], distributed: bool, why: str = "") -> dict[str, Any] | None:
    if not (mine["loss"] or mine["origin"] or mine["post"]):
        return None
    STATE.pending, STATE.micro = None, 0
    origins = [int(os.environ.get("RANK", "0") or 0)] if mine["loss"] or mine["origin"] else []
    if distributed and not why:
        why = "; this rank alone: no gradient sync in this backward that every rank sees alike"
    return {"local": mine, "origins": origins, "kinds": {}, "via": "alone" if distributed else "local", "why": why}


def _reduce(dist: Any) -> Any:
    """torch's own all_reduce: not through the collective record, which keeps the user's collectives."""
    fn = dist.distributed_c10d.all_reduce
    return getattr(fn, "__wrapped__", fn) if getattr(fn, "__rtdebug_collrec__", False) else fn


def _posts(model: Any) -> list[Any]:
    """After the reduction: the flags of every gradient of this step's model (a shard's own, FSDP2)."""
    return [finite.flag(ddp.local(p.grad)) for p in ddp.watched(model) if p.grad is not None]


def _post(model: Any) -> bool:
    return finite.any_true(_posts(model))


def _ddp(dist: Any, pg: Any, mine: dict[str, Any], this: tuple[Any, Any]) -> dict[str, Any] | None:
    saved, model = this  # each gradient's own element 0 (None: nothing carried: a comm hook), the model
    carried = mine["loss"] or mine["pending"] is not None
    if not mine["post"]:
        if carried or mine["origin"]:  # it did not reach the others (no carrier under a comm hook): alone
            return _alone(mine, distributed=True, why="; this rank alone: the others did not receive it")
        STATE.micro = 0
        return None
    import torch

    # every replica is here alike (the same reduced gradients, the same elements read): one all-reduce,
    # on DDP's group, names the origins and sums the carriers' own values
    members = dist.get_process_group_ranks(pg)
    me = members.index(dist.get_rank())
    params = [p for p in ddp.watched(model) if p.grad is not None]
    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(pg) == "nccl" else "cpu"
    # per rank: origin (1: a gradient, 2: the loss alone); then per gradient, the rank's own element 0
    rows = torch.zeros(len(members) + len(params), dtype=torch.float64, device=dev)
    rows[me] = 1.0 if mine["origin"] else (2.0 if carried else 0.0)
    if saved:
        for i, p in enumerate(params):
            v = saved[id(p)][1] if id(p) in saved else None
            if v is not None:
                rows[len(members) + i] = v if isinstance(v, float) else v.double().reshape(())
    _reduce(dist)(rows, group=pg)
    table = rows.cpu().tolist()
    kinds = {members[i]: int(v) for i, v in enumerate(table[: len(members)]) if v > 0}
    if saved is not None:
        _restore(params, table[len(members) :], len(members))
        mine["post"] = _post(model)
    STATE.pending, STATE.micro = None, 0
    return {"local": mine, "origins": sorted(kinds), "kinds": kinds, "via": "all-reduce"}


def _restore(params: list[Any], sums: list[float], n: int) -> None:
    """Each gradient's element 0 that is not finite after the reduction back to what DDP's reduction makes
    of the ranks' own values: their mean, computed once from the same sums on every rank (so the replicas
    stay identical). Where the element was truly non-finite, a rank's own value was too, and so is the
    mean."""
    for p, total in zip(params, sums, strict=True):
        try:
            g0 = p.grad.detach().view(-1)[:1]
        except RuntimeError:
            continue  # never carried (``ddp._carry``)
        if not finite.truthy(finite.flag(g0)):
            continue
        g0.fill_(total / n)


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
        STATE.micro = 0
        return None
    STATE.pending, STATE.micro = None, 0
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
        alone = event.get("why", "") if via == "alone" else ""
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
