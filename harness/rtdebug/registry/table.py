"""The rank table: how a session's ranks read on a terminal (the launcher's ready line, ``rtdebug ps``)."""

from __future__ import annotations

import os
import time
from typing import Any

from rtdebug.common import selector
from rtdebug.registry import collseq
from rtdebug.registry.schema import ListedSession, RankEntry, SessionEntry


def world_size(session: ListedSession) -> int:
    """The job's world size: from a rank entry, else ``--nnodes`` (``N`` or ``MIN:MAX``) x nproc per node."""
    for r in session.get("ranks", []):
        return int(r["world_size"])
    return int(str(session["nnodes"]).rpartition(":")[2]) * int(session["nproc_per_node"])


def _shown(text: Any, limit: int) -> str:
    return "".join(c if c.isprintable() else "?" for c in str(text)[:limit])


def debug_state(r: RankEntry) -> str:
    """``stopped at train.py:41 (breakpoint)``, ``paused (all-stop, by rank 1) at train.py:50``, ``pausing (in
    a native call at train.py:41, by rank 1)``, ``running``: the entry's ``debug`` field, or ""."""
    d = r.get("debug")
    if not isinstance(d, dict) or d.get("state") not in ("running", "stopped", "paused", "pausing"):
        return ""
    file, line, by = d.get("file"), d.get("line"), d.get("by")
    at = f" at {_shown(os.path.basename(file), 80)}:{line}" if isinstance(file, str) and isinstance(line, int) else ""
    who = f", by rank {by}" if isinstance(by, int) and not isinstance(by, bool) else ""
    if d["state"] == "stopped":
        return f"stopped{at}" + (f" ({_shown(d['reason'], 40)})" if isinstance(d.get("reason"), str) else "")
    if d["state"] == "paused":
        return f"paused (all-stop{who}){at}"
    if d["state"] == "pausing":
        return f"pausing (in a native call{at}{who})" if at else f"pausing (all-stop{who})"
    return "running"


def rank_state(r: RankEntry) -> str:
    s = r["state"]
    stop = r.get("stop")
    if s in ("ready", "attached") and isinstance(stop, dict) and isinstance(stop.get("reason"), str):
        kind = "".join(c for c in str(stop.get("kind"))[:12] if c.isalnum())
        reason = "".join(c if c.isprintable() else "?" for c in stop["reason"][:120])
        return f"stopped ({kind}: {reason})"
    debug = debug_state(r) if s in ("ready", "attached") else ""
    if debug and debug != "running":
        return debug
    if debug and s == "attached":
        return "attached, running"
    if s == "ready" and r.get("wait") and r.get("attach_count", 0) == 0:
        return "ready (waiting)"
    if s == "ready" and r.get("attach_count", 0) > 0:
        return "ready (detached)"
    return s


def pg_timeout(session: SessionEntry) -> str:
    """The job's process-group timeout as ``ps`` shows it (a rank paused longer ends the job), or ""."""
    value, source = session.get("pg_timeout_s"), session.get("pg_timeout_source")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"pg-timeout {value:g}s ({source})" if source else f"pg-timeout {value:g}s"
    return f"pg-timeout {source}" if source else ""


def collective(r: RankEntry, now: float | None = None) -> str:
    """``in ALLREDUCE #12 (train.py:42) 40s``: the rank's last collective (``ps --json``'s ``collective``), or ""."""
    c = r.get("collective")
    if not collseq.plausible(c):  # a store entry's field is as forgeable as the rest of it
        return ""
    where = collseq.where(c)
    if c.get("state") != "entered":
        return f"after {where}"
    since = c.get("since")
    waited = (now or time.time()) - since if isinstance(since, (int, float)) else None
    return f"in {where}" + (f" {waited:.0f}s" if waited is not None and 0 <= waited < 1e9 else "")


def own_pid(r: RankEntry) -> int:
    """The rank's own pid: a connected rank's is on its node (``tunnel.remote_pid``), never the ssh master's
    that carries its forward here (which the entry's ``pid`` names, so that a dead link makes it ``failed``)."""
    t = r.get("tunnel")
    remote = t.get("remote_pid") if isinstance(t, dict) else None
    return remote if isinstance(remote, int) and not isinstance(remote, bool) else int(r["pid"])


def format_table(ranks: list[RankEntry], session_id: str) -> str:
    colls = {r["rank"]: collective(r) for r in ranks}  # a column only once some rank has entered one
    coords = {r["rank"]: selector.label(r) for r in ranks}  # a column once the job has made a DeviceMesh
    extra = (("COORDS",) if any(coords.values()) else ()) + (("COLLECTIVE",) if any(colls.values()) else ())
    rows = [("RANK", "LOCAL", "PID", "ENDPOINT", "STATE", "ATTACH") + extra]
    for r in sorted(ranks, key=lambda r: r["rank"]):
        rows.append(
            (
                str(r["rank"]),
                str(r["local_rank"]),
                str(own_pid(r)),
                f"{r['host']}:{r['port']}",
                rank_state(r),
                f"rtdebug attach --session {session_id} --rank {r['rank']}",
            )
            + ((coords[r["rank"]],) if any(coords.values()) else ())
            + ((colls[r["rank"]],) if any(colls.values()) else ())
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
