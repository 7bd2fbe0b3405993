"""``disagree:N``: do the data-parallel replicas still hold the same parameters?

Every N optimizer steps each replica hashes each parameter -- the integer sum of its bit pattern, exact
and order-free for a given layout -- and one all-gather of that small vector (one int64 per parameter)
compares them, before ``optimizer.step()``. A replica whose hash differs from the majority's is named,
with the first parameter that differs. The group is the DDP module's (its ranks are replicas).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

_INT = {8: "int64", 4: "int32", 2: "int16", 1: "int8"}


def _hash(torch: Any, p: Any) -> Any:
    t = p.detach().contiguous().reshape(-1)
    view = _INT.get(t.element_size())
    if view is None or t.is_complex():
        return torch.zeros((), dtype=torch.int64)
    return t.view(getattr(torch, view)).sum(dtype=torch.int64)


def check(optimizer: Any, name_of: Callable[[Any], str | None], pg: Any) -> tuple[str, bool] | None:
    """(the reason, is this rank the odd one) when the replicas differ; None when they agree or there is
    no group of replicas. ``name_of``: a parameter's name in its DDP module (``ddp.name_of``)."""
    import torch
    import torch.distributed as dist

    if pg is None or not dist.is_initialized():
        return None
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if not params:
        return None
    mine = torch.stack([_hash(torch, p) for p in params])
    members = dist.get_process_group_ranks(pg)
    gathered = [torch.empty_like(mine) for _ in members]
    dist.all_gather(gathered, mine, group=pg)
    table = torch.stack(gathered)  # replicas x parameters
    for i, p in enumerate(params):
        col = table[:, i].tolist()
        if len(set(col)) == 1:
            continue
        majority = Counter(col).most_common(1)[0][0]
        odd = [members[r] for r, v in enumerate(col) if v != majority]
        agree = [members[r] for r, v in enumerate(col) if v == majority]
        name = name_of(p) or f"parameter {i}"
        ranks = ", ".join(map(str, odd))
        with_ = ", ".join(map(str, agree))
        reason = f"rank{'s' if len(odd) > 1 else ''} {ranks} differ{'' if len(odd) > 1 else 's'} from {with_} in {name}"
        return reason, dist.get_rank() in odd
    return None
