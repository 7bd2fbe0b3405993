"""What a registry entry means now: live, orphaned, or ended (and how it ended).

Every reader goes through ``prune`` before trusting the files, so an entry never
claims more than the processes behind it:

- launcher alive: the session is live; a rank whose process vanished without
  writing its end is marked ``failed`` ("process gone").
- launcher gone, but a recorded process (torchrun agent, a rank) still alive:
  the session and those ranks are ``orphaned``, listed by ``ps`` and ended by
  ``stop``. The lifetime guards (``harness.lifetime``) make this a window of
  seconds, but a guard can be defeated (a SIGSTOPped rank, a rank from an old
  harness), and then the user must still see and stop it.
- nothing alive: the session has ended. If its launcher died without recording
  the end (SIGKILL, OOM), it is marked ``failed`` with the reason; ended
  sessions stay on disk for ``RETENTION_S`` (``ps --all``) so the registry says
  what happened, then are removed.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from harness.procinfo import is_alive
from harness.registry import LIVE_RANK_STATES, LIVE_SESSION_STATES, Registry

RETENTION_S = 24 * 3600.0
TMP_GRACE_S = 60.0  # a temp file older than this belongs to a writer that died mid-write
Entry = dict[str, Any]


def agent_alive(session: Entry) -> bool:
    pid, ct = session.get("agent_pid"), session.get("agent_create_time")
    return isinstance(pid, int) and isinstance(ct, (int, float)) and is_alive(pid, ct)


def _mark_ranks(reg: Registry, ranks: list[Entry], states: tuple[str, ...], now: float, **fields: Any) -> None:
    for r in ranks:
        if r["state"] in states:
            try:
                reg.write_rank(dict(r, updated_at=now, **fields))
            except OSError:
                pass


def _sweep_tmp(reg: Registry, session_id: str, now: float) -> None:
    for p in reg.session_dir(session_id).glob(".tmp-*"):
        try:
            if now - p.stat().st_mtime > TMP_GRACE_S:
                p.unlink()
        except OSError:
            pass


def prune(reg: Registry) -> list[Entry]:
    """Bring every entry in line with its processes; return the active (live or orphaned) sessions."""
    active: list[Entry] = []
    now = time.time()
    for s in list(reg.sessions()):
        sid = s["session_id"]
        ranks = reg.ranks(sid)
        alive = {r["rank"] for r in ranks if is_alive(r["pid"], r["create_time"])}
        dead_live = [r for r in ranks if r["rank"] not in alive]
        _sweep_tmp(reg, sid, now)
        if is_alive(s["launcher_pid"], s["launcher_create_time"]):
            _mark_ranks(reg, dead_live, LIVE_RANK_STATES, now, state="failed", error="process gone")
            active.append(s)
            continue
        if alive or agent_alive(s):
            if s["state"] != "orphaned":
                reg.update_session(
                    sid,
                    state="orphaned",
                    orphaned_at=now,
                    error=f"launcher pid {s['launcher_pid']} is gone; its processes are not",
                )
            _mark_ranks(reg, [r for r in ranks if r["rank"] in alive], LIVE_RANK_STATES, now, state="orphaned")
            _mark_ranks(reg, dead_live, LIVE_RANK_STATES + ("orphaned",), now, state="failed", error="process gone")
            active.append(reg.read_session(sid) or s)
            continue
        rank_error = "process gone"
        if s["state"] in LIVE_SESSION_STATES + ("orphaned",):
            why = (
                "launcher died without teardown" if s["state"] != "orphaned" else "orphaned processes ended"
            ) + f" (launcher pid {s['launcher_pid']})"
            reg.update_session(sid, state="failed", ended_at=now, error=why)
            s = dict(s, ended_at=now)
            rank_error = f"ended with its launcher (pid {s['launcher_pid']})"
        _mark_ranks(reg, ranks, LIVE_RANK_STATES + ("orphaned",), now, state="failed", error=rank_error)
        ended = s.get("ended_at") or s.get("updated_at") or now
        if now - ended > RETENTION_S:
            shutil.rmtree(reg.session_dir(sid), ignore_errors=True)
    return active


def ended_sessions(reg: Registry) -> list[Entry]:
    """Sessions that have ended and are still kept (``ps --all``), newest last."""
    active = {s["session_id"] for s in prune(reg)}
    return [dict(s, ranks=reg.ranks(s["session_id"])) for s in reg.sessions() if s["session_id"] not in active]
