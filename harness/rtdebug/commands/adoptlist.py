"""``rtdebug adopt --list [--json]``: the jobs of yours on this machine that can be adopted, and the session
that adopted each already. The VS Code "Adopt a Running Job..." picker is built on the JSON (contract B1):
a list of {"pid", "kind", "script", "ranks", "world_size", "running_s", "adopted_session"}.
"""

from __future__ import annotations

import json
from typing import Any

from rtdebug.inject import jobs
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.schema import RankEntry


def _adopted_by_pid(reg: Registry) -> dict[int, tuple[str, RankEntry | None]]:
    """{pid: (session id, its rank entry)} for every live adopted session: its agent's pid (no entry, unless
    the agent is the rank: a Ray worker) and its live ranks' pids."""
    out: dict[int, tuple[str, RankEntry | None]] = {}
    for s in prune(reg):
        if s.get("mode") == "adopted":
            sid = s["session_id"]
            out[int(s["launcher_pid"])] = (sid, None)
            out.update((int(r["pid"]), (sid, r)) for r in reg.ranks(sid) if reg.live_rank(r))
    return out


def listing() -> list[dict[str, Any]]:
    """``rtdebug adopt --list --json``: the jobs of yours on this machine that can be adopted (the VS Code
    picker's contract), each with the session that adopted it already, if one did. A Ray worker's rank is
    known once it was adopted (its process said so), else null."""
    by_pid = _adopted_by_pid(Registry())
    out = []
    for job in jobs.candidates():
        pids = [job.agent_pid, *(r.pid for r in job.ranks)]
        sid, rank = next((by_pid[p] for p in pids if p in by_pid), (None, None))
        entry = job.listing(sid)
        if job.kind == "ray" and rank is not None:
            entry.update(ranks=[rank["rank"]], world_size=rank["world_size"])
        out.append(entry)
    return out


def show(as_json: bool) -> int:
    found = listing()
    if as_json:
        print(json.dumps(found, indent=1))
        return 0
    if not found:
        print("no torchrun job or Ray Train worker of yours runs on this machine")
        return 0
    rows = [("PID", "KIND", "RANKS", "RUNNING", "ADOPTED", "SCRIPT")]
    for j in found:
        ranks = ",".join("?" if r is None else str(r) for r in j["ranks"])
        size = f"/{j['world_size']}" if j["world_size"] is not None else ""
        running = jobs.duration(j["running_s"])
        rows.append((str(j["pid"]), j["kind"], ranks + size, running, j["adopted_session"] or "-", j["script"]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows))
    return 0
