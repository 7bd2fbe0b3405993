"""torch's Flight Recorder, read by the rank's dump thread at dump time: every collective, wherever issued.

The collective record (``rtdebug.rank.collectives.recorder``) wraps the ``torch.distributed`` functions, so it sees
only collectives called from Python. DDP's gradient buckets, FSDP and coalesced groups are issued from
C++ -- most of a real job's collectives. torch's Flight Recorder sees those too (on by default for gloo
and NCCL since torch 2.13), but only from inside the rank: so the rank's dump thread
(``rtdebug.stacks.dump``, and the store and KV watchers) reads it when a dump is asked for, and never
otherwise. ``_dump_fr_trace_json`` without stack traces takes well under a millisecond for a few dozen
entries and ~10 ms for a full ring (bench/STACKS_RESULTS.md); it is the one torch call the dump makes.

``read()`` runs in the rank (stdlib, and torch only if the job already imported it); ``plausible`` and
``last`` run in the requester, on answers that may be forged. NCCL and gloo write the same JSON, so the
GPU path is the same code (its decisions are tested on recorded entries).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rtdebug.common import log
from rtdebug.registry.collseq import has_control
from rtdebug.stacks import group as stackgroup

MAX_GROUPS = 64  # process groups described per rank
KEEP = 64  # newest entries sent per rank: the position, the history and the counts' window
MAX_JSON = 24 << 10  # bytes of summary a requester accepts from one rank
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
        log.swallowed("stacks.flight: read: going on")
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
        log.swallowed("stacks.flight: read: going on")
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
            log.swallowed("stacks.flight: groups: going on")
            continue
        out[str(name)[:32]] = {"desc": desc, "ranks": members[:256]}
    return out


def members(flight: dict[str, Any], pg: Any) -> set[int] | None:
    """The ranks of group ``pg`` as the rank's recorder names them (None: unknown or malformed)."""
    groups = flight.get("groups")
    g = groups.get(pg) if isinstance(groups, dict) else None
    text = g.get("ranks") if isinstance(g, dict) else None
    if not isinstance(text, str) or len(text) > 256:
        return None
    out: set[int] = set()
    try:
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
            if not 0 <= a <= b < 1 << 20 or b - a > 1 << 16:
                return None
            out.update(range(a, b + 1))
    except ValueError:
        return None
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


# -- requester side: answers may be forged ----------------------------------------------------------

_FIELDS = {"pg": str, "desc": str, "seq": int, "op": str, "p2p": bool, "sizes": str, "dtypes": str, "state": str}


def _entry_ok(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    for k, t in _FIELDS.items():
        v = e.get(k)
        if not isinstance(v, t) or (t is int and isinstance(v, bool)):
            return False
        if isinstance(v, str) and (len(v) > 64 or has_control(v)):
            return False
    return e["state"] in ("entered", "returned") and 0 <= e["seq"] < 1 << 62


def plausible(flight: Any) -> bool:
    """A summary a verdict may use: the shapes ``summarize`` makes, bounded, printable."""
    if not isinstance(flight, dict) or "off" in flight:
        return False
    entries, counts = flight.get("entries"), flight.get("counts")
    if not isinstance(entries, list) or len(entries) > KEEP or not all(_entry_ok(e) for e in entries):
        return False
    if not isinstance(counts, dict) or len(counts) > 64:
        return False
    try:
        return len(json.dumps(flight)) <= MAX_JSON
    except (TypeError, ValueError, RecursionError):
        return False


def off_reason(flight: Any) -> str | None:
    """Why a rank's recorder gave nothing (a short printable text), or None."""
    if isinstance(flight, dict) and isinstance(flight.get("off"), str):
        return "".join(c if c.isprintable() else "?" for c in flight["off"][:120])
    return None


def last(flight: dict[str, Any]) -> dict[str, Any] | None:
    """The rank's newest collective (the one it is in, if not yet returned), in the record's dict shape."""
    entries = [e for e in flight["entries"] if not e["p2p"]]
    if not entries:
        return None
    e = entries[-1]
    return {"op": e["op"], "seq": e["seq"], "state": e["state"], "pg": e["pg"], "shapes": e["sizes"],
            "dtype": e["dtypes"], "file": None, "line": None, "source": "flight", "desc": e["desc"]}  # fmt: skip


def count(flight: dict[str, Any], pg: Any, op: str) -> int | None:
    """How many ``op`` this rank ran on group ``pg`` in its recorder's window (None: unknown)."""
    if flight.get("wrapped") is not False:  # the ring dropped its oldest entries: a count says too little
        return None
    counts = flight.get("counts")
    per_pg = counts.get(pg) if isinstance(counts, dict) else None
    n = per_pg.get(op) if isinstance(per_pg, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _issuer(frames: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(who issued a collective the record did not see, during what), from the rank's main-thread stack:
    ("DDP"/"FSDP"/None, "backward()"/None)."""
    files = [str(f.get("file")).replace("\\", "/") for f in frames]
    during = (
        "backward()" if any(f.get("function") in ("_engine_run_backward", "run_backward") for f in frames) else None
    )
    if any("/fsdp/" in f for f in files):
        return "FSDP", during
    if any(f.endswith("nn/parallel/distributed.py") for f in files):
        return "DDP", during
    return None, during


def position(flight: dict[str, Any], rec: dict[str, Any] | None, frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank's place in the sequence, from its Flight Recorder (every collective), with the call site
    from the collective record when the wrapper saw the same call (a Python-level one), or else the
    user's frame of the main thread's stack and what it was doing (a collective issued from C++)."""
    pos = last(flight)
    if pos is None:
        return None
    same = rec is not None and rec.get("state") == pos["state"] == "entered"
    if same and rec is not None and rec.get("op") == pos["op"] and rec.get("pg") == pos["pg"]:
        pos.update(file=rec.get("file"), line=rec.get("line"), func=rec.get("func"), issued="python")
        return pos
    user = next((f for f in frames if f.get("kind") == "user"), None)
    if user is not None and pos["state"] == "entered":
        pos.update(file=user.get("file"), line=user.get("line"), func=user.get("function"))
    by, during = _issuer(frames)
    if by is None and during == "backward()" and pos["op"] == "ALLREDUCE":
        by = "DDP"  # its reducer all-reduces gradient buckets from C++ autograd hooks: no Python frame of its own
    pos.update(issued="torch", by=by, during=during)
    return pos
