"""torch's Flight Recorder, read by the rank's dump thread at dump time: every collective, wherever issued.

The collective record (``rtdebug.rank.collectives.recorder``) sees only collectives called from Python;
DDP's gradient buckets, FSDP and coalesced groups are issued from C++. torch's Flight Recorder sees those
too (on by default for gloo and NCCL since torch 2.13), but only from inside the rank: so the rank's dump
thread (``rtdebug.rank.stacks.dump``, and the store and KV watchers) reads it when a dump is asked for, and
never otherwise. ``_dump_fr_trace_json`` without stack traces takes well under a millisecond for a few
dozen entries and ~10 ms for a full ring; it is the one torch call the dump makes.

Stdlib, and torch only if the job already imported it. The requester reads the summary with
``rtdebug.stacks.flight`` (which bounds what it accepts: ``KEEP`` entries).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks.flight import KEEP

MAX_GROUPS = 64  # process groups described per rank
OFF_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def op_name(profiling_name: str) -> str:
    """``gloo:all_reduce`` / ``nccl:_reduce_scatter_base`` -> ``ALLREDUCE`` / ``REDUCE_SCATTER_BASE``
    (the collective record's spelling where it has one)."""
    from rtdebug.registry.collseq import OPS

    name = str(profiling_name).rsplit(":", 1)[-1].lstrip("_")
    return OPS.get(name, name.upper())[:40]


def _off_by_env() -> str | None:
    for var in OFF_VARS:
        if os.environ.get(var, "").strip() == "0":
            return f"disabled by {var}=0"
    return None


def read() -> dict[str, Any] | None:
    """This rank's Flight Recorder summary now; None when the job has no process group (nothing to say),
    ``{"off": why}`` when the recorder is missing or disabled."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_initialized():
            return None
    except Exception:
        log.swallowed("rank.stacks.flight: read: going on")
        return None
    why = _off_by_env()
    if why is not None:
        return {"off": why}
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return {"off": "this torch has no Flight Recorder (torch 2.13 has it for gloo and NCCL)"}
    try:
        raw = dump(includeCollectives=True, onlyActive=False)
        return dict(summarize(json.loads(raw)), groups=groups(dist.distributed_c10d))
    except Exception as exc:
        log.swallowed("rank.stacks.flight: read: going on")
        return {"off": f"reading it failed: {type(exc).__name__}"}


def summarize(trace: dict[str, Any]) -> dict[str, Any]:
    """The newest ``KEEP`` entries, compact, plus per-group op counts over the whole ring."""
    entries = trace.get("entries") or []
    counts: dict[str, dict[str, int]] = {}
    for e in entries:
        pg = str((e.get("process_group") or ["?"])[0])[:32]
        op = op_name(e.get("profiling_name", "?"))
        per_pg = counts.setdefault(pg, {})
        per_pg[op] = per_pg.get(op, 0) + 1
    out = [_compact(e) for e in entries[-KEEP:]]
    first = entries[0].get("record_id", 0) if entries else 0
    return {"entries": out, "counts": counts, "total": len(entries), "wrapped": bool(first)}


def groups(c10d: Any) -> dict[str, dict[str, str]]:
    """Each process group's members, from torch's own table in this rank (the recorder's ``pg_config``
    does not list gloo subgroups): {name: {"desc", "ranks": "0-1"}}, at most ``MAX_GROUPS``."""
    out: dict[str, dict[str, str]] = {}
    world = getattr(c10d, "_world", None)
    names = getattr(world, "pg_names", None) or {}
    ranks = getattr(world, "pg_group_ranks", None) or {}
    for pg, name in list(names.items())[:MAX_GROUPS]:
        try:
            members = stackgroup.rank_list(list(ranks.get(pg, {}).keys()))
            desc = str(getattr(pg, "group_desc", ""))[:48]
        except Exception:
            log.swallowed("rank.stacks.flight: groups: going on")
            continue
        out[str(name)[:32]] = {"desc": desc, "ranks": members[:256]}
    return out


def _compact(e: dict[str, Any]) -> dict[str, Any]:
    p2p = bool(e.get("is_p2p"))
    pg = e.get("process_group") or ["?", ""]
    return {
        "pg": str(pg[0])[:32],
        "desc": str(pg[1] if len(pg) > 1 else "")[:48],
        "seq": int(e.get("p2p_seq_id" if p2p else "collective_seq_id") or 0),
        "op": op_name(e.get("profiling_name", "?")),
        "p2p": p2p,
        "sizes": str(e.get("input_sizes", ""))[:64],
        "dtypes": ",".join(str(d) for d in (e.get("input_dtypes") or []))[:32],
        "state": "returned" if e.get("retired") else "entered",
        "thread": str(e.get("thread_name", ""))[:32],
    }
