"""What a registry entry means now: live, orphaned, or ended (and how it ended).

An entry never claims more than the processes behind it:

- launcher alive: the session is live; a rank whose process vanished without
  writing its end is ``failed`` ("process gone").
- launcher gone, but a recorded process (torchrun agent, a rank) still alive:
  the session and those ranks are ``orphaned``, listed by ``ps`` and ended by
  ``stop``. The lifetime guards (``rtdebug.common.lifetime``) make this a window
  of seconds, but a guard can be defeated (a SIGSTOPped rank), and then the user
  must still see and stop it.
- nothing alive: the session has ended. If its launcher died without recording
  the end (SIGKILL, OOM), it is ``failed`` with the reason; ended sessions stay
  on disk for ``RETENTION_S`` (``ps --all``), then are removed.

Reading has no side effects: ``assess`` decides all of the above in memory, and
``live_sessions``/``ended_sessions`` answer from it. ``prune`` is the one step
that writes the decisions to disk (the shell runs it once per command, a new
session runs it under the registry lock before reserving its ports).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.entry import LIVE_RANK_STATES, LIVE_SESSION_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import RankEntry, RankStateName, SessionEntry, SessionState, SessionWithRanks

RETENTION_S = 24 * 3600.0
TMP_GRACE_S = 60.0  # a temp file older than this belongs to a writer that died mid-write
UNENDED_RANK_STATES = LIVE_RANK_STATES + ("orphaned",)


class SessionChange(TypedDict, total=False):
    """The fields of a session entry that its processes' state changes (``Registry.update_session`` writes them)."""

    state: SessionState
    ended_at: float
    orphaned_at: float
    error: str


class RankChange(TypedDict, total=False):
    """The fields of a rank entry that its process's state changes."""

    state: RankStateName
    error: str


@dataclass
class Verdict:
    """One session as its processes say it is now, and what to write to make the files say so."""

    session: SessionWithRanks  # with the decided state; "ranks" holds the decided rank entries
    active: bool  # live or orphaned
    session_update: SessionChange = field(default_factory=SessionChange)
    rank_updates: list[RankEntry] = field(default_factory=list)  # whole rank entries to write
    expired: bool = False  # ended longer ago than RETENTION_S: remove


def agent_alive(session: SessionEntry) -> bool:
    pid, ct = session.get("agent_pid"), session.get("agent_create_time")
    return isinstance(pid, int) and isinstance(ct, (int, float)) and is_alive(pid, ct)


def _ended_session_update(s: SessionEntry, now: float) -> tuple[SessionChange, str]:
    """The fields that record how a session whose processes are all gone ended, and its ranks' error."""
    if s["state"] not in LIVE_SESSION_STATES + ("orphaned",):
        return {}, "process gone"
    how = "launcher died without teardown" if s["state"] != "orphaned" else "orphaned processes ended"
    why = f"{how} (launcher pid {s['launcher_pid']})"
    return SessionChange(state="failed", ended_at=now, error=why), f"ended with its launcher (pid {s['launcher_pid']})"


def judge(s: SessionEntry, ranks: list[RankEntry], now: float) -> Verdict:
    """Decide one session from its entries and its processes (reads /proc, writes nothing)."""
    if s.get("mode") == "adopted" and s["state"] == "stopped":  # detached: the job runs on, no longer ours
        ended = s.get("ended_at") or now
        left: list[RankEntry] = [{**r, "state": "exited", "updated_at": now} for r in ranks  # ended since detached
                if r["state"] == "detached" and not is_alive(r["pid"], r["create_time"])]  # fmt: skip
        by_rank = {r["rank"]: r for r in left}
        kept: SessionWithRanks = {**s, "ranks": [by_rank.get(r["rank"], r) for r in ranks]}
        return Verdict(kept, False, rank_updates=left, expired=now - ended > RETENTION_S)
    alive = {r["rank"] for r in ranks if is_alive(r["pid"], r["create_time"])}
    marks: list[tuple[RankEntry, RankChange]] = []
    gone = RankChange(state="failed", error="process gone")
    if is_alive(s["launcher_pid"], s["launcher_create_time"]):
        update = SessionChange()
        marks = [(r, gone) for r in ranks if r["rank"] not in alive and r["state"] in LIVE_RANK_STATES]
        active = True
    elif alive or agent_alive(s):
        update = SessionChange()
        if s["state"] != "orphaned":
            error = f"launcher pid {s['launcher_pid']} is gone; its processes are not"
            update = SessionChange(state="orphaned", orphaned_at=now, error=error)
        for r in ranks:
            if r["rank"] in alive and r["state"] in LIVE_RANK_STATES:
                marks.append((r, RankChange(state="orphaned")))
            elif r["rank"] not in alive and r["state"] in UNENDED_RANK_STATES:
                marks.append((r, gone))
        active = True
    else:
        update, rank_error = _ended_session_update(s, now)
        marks = [(r, RankChange(state="failed", error=rank_error)) for r in ranks if r["state"] in UNENDED_RANK_STATES]
        active = False
    rank_updates: list[RankEntry] = [{**r, "updated_at": now, **fields} for r, fields in marks]
    changed = {r["rank"]: r for r in rank_updates}
    decided: SessionWithRanks = {**s, **update, "ranks": [changed.get(r["rank"], r) for r in ranks]}
    ended = decided.get("ended_at") or decided.get("updated_at") or now
    return Verdict(decided, active, update, rank_updates, expired=not active and now - ended > RETENTION_S)


def assess(reg: Registry, now: float | None = None) -> list[Verdict]:
    """Every session in ``reg``, decided (no file is written)."""
    now = time.time() if now is None else now
    return [judge(s, reg.ranks(s["session_id"]), now) for s in list(reg.sessions())]


def live_sessions(reg: Registry) -> list[SessionWithRanks]:
    """Sessions with a live launcher or live processes (orphaned), each with its ``ranks``; read-only."""
    return [v.session for v in assess(reg) if v.active]


def ended_sessions(reg: Registry) -> list[SessionWithRanks]:
    """Sessions that have ended and are still kept (``ps --all``); read-only."""
    return [v.session for v in assess(reg) if not v.active and not v.expired]


def _sweep_tmp(reg: Registry, session_id: str, now: float) -> None:
    for p in reg.session_dir(session_id).glob(".tmp-*"):
        try:
            if now - p.stat().st_mtime > TMP_GRACE_S:
                p.unlink()
        except OSError:
            pass


def prune(reg: Registry) -> list[SessionWithRanks]:
    """Write every decision to disk, remove expired sessions; return the active sessions."""
    now = time.time()
    active = []
    for v in assess(reg, now):
        sid = v.session["session_id"]
        _sweep_tmp(reg, sid, now)
        for r in v.rank_updates:
            try:
                reg.write_rank(r)
            except OSError:
                pass
        if v.session_update:
            reg.update_session(sid, **v.session_update)
        if v.expired:
            shutil.rmtree(reg.session_dir(sid), ignore_errors=True)
        elif v.active:
            active.append(v.session)
    return active


def reserve_session(reg: Registry, entry: Mapping[str, Any]) -> None:
    """Write a new session entry, refusing ports that an active session already holds.

    Under the registry lock, so two launchers starting at the same moment can never both get
    overlapping ports; stale sessions are pruned first so that their ports are free again.
    """
    with reg.lock():
        wanted = set(entry["ports"])
        for other in prune(reg):
            if other["host"] != entry["host"] and "0.0.0.0" not in (other["host"], entry["host"]):
                continue
            clash = sorted(wanted & set(other["ports"]))
            if clash:
                raise HarnessError(
                    f"debug port {clash[0]} is reserved by session {other['session_id']} "
                    f"(pid {other['launcher_pid']}); pick another range with --debug-port-base"
                )
        reg.write_new_session(entry)
