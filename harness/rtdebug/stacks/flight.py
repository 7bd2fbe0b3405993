"""torch's Flight Recorder as a rank's answer carries it: every collective, wherever issued, read by the requester.

The collective record (``rtdebug.rank.collectives.recorder``) wraps the ``torch.distributed`` functions, so it sees
only collectives called from Python. DDP's gradient buckets, FSDP and coalesced groups are issued from
C++ -- most of a real job's collectives. torch's Flight Recorder sees those too (on by default for gloo
and NCCL since torch 2.13), but only from inside the rank: so the rank's dump thread reads it when a dump
is asked for, and never otherwise (``rtdebug.rank.stacks.flight``, which makes the summary this module reads).

Everything here runs in the requester, on answers that may be forged: ``plausible`` bounds a summary's
shape, ``last`` and ``position`` find a rank's place in the sequence, ``count`` and ``members`` what the
verdict says of a group. NCCL and gloo write the same JSON, so the GPU path is the same code (its
decisions are tested on recorded entries).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rtdebug.registry.collseq import has_control

KEEP = 64  # newest entries sent per rank: the position, the history and the counts' window
MAX_JSON = 24 << 10  # bytes of summary a requester accepts from one rank


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


def position(
    flight: dict[str, Any], rec: Mapping[str, Any] | None, frames: list[dict[str, Any]]
) -> dict[str, Any] | None:
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
