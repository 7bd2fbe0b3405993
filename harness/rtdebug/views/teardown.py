"""``rtdebug stop`` for a session started on this machine: its whole process tree, then its ports.

Only processes this machine's own records vouch for are signalled, and only while they are the
session's:

- the launcher and the torchrun agent, as the session's own registry file (owner-only) records them,
  while their create time matches (pids get reused);
- a rank, or any descendant of the above, only if its ``/proc/<pid>/environ`` carries
  ``RTDEBUG_SESSION=<this session's id>`` (the launcher exports it to everything it starts) and, for a
  rank, its create time matches too.

Everything is re-read from the registry files here: the session passed in may have been merged with a
remote view, whose pids are never signalled. A live launcher is asked first (its own teardown stops
torchrun and records the end); an orphaned session (launcher gone) has its agent and ranks ended
directly, whatever its entry says.
"""

from __future__ import annotations

import time

import psutil

from rtdebug.common import processes
from rtdebug.common.errors import HarnessError
from rtdebug.common.ports import is_port_free, port_holder
from rtdebug.common.procinfo import is_alive
from rtdebug.inject import runner as inject
from rtdebug.registry.entry import ATTACHABLE_STATES, LIVE_RANK_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import RankEntry, SessionEntry

SESSION_VAR = b"RTDEBUG_SESSION="


def carries_session(pid: int, session_id: str) -> bool:
    """True if the process's own environment (as it was exec'd) names ``session_id``."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:  # gone, another user's, or no /proc
        return False
    return SESSION_VAR + session_id.encode() in env.split(b"\0")


def _same(p: psutil.Process, pid: int, create_time: float) -> bool:
    return p.pid == pid and abs(p.create_time() - create_time) <= 0.01


def recorded_processes(session: SessionEntry, ranks: list[RankEntry]) -> list[psutil.Process]:
    """The session's launcher and torchrun agent (as recorded) and its ranks and their descendants (as
    recorded *and* carrying the session id), while each is still the process recorded."""
    sid = session["session_id"]
    vouched: list[tuple[int, float]] = []  # the registry's own record of processes it started
    if is_alive(session["launcher_pid"], session["launcher_create_time"]):
        vouched.append((session["launcher_pid"], session["launcher_create_time"]))
    agent, agent_ct = session.get("agent_pid"), session.get("agent_create_time")
    if isinstance(agent, int) and isinstance(agent_ct, (int, float)) and is_alive(agent, agent_ct):
        vouched.append((agent, agent_ct))
    roots = [pid for pid, _ in vouched]
    roots += [r["pid"] for r in ranks if is_alive(r["pid"], r["create_time"]) and carries_session(r["pid"], sid)]
    out = []
    for p in processes.tree(roots):
        try:
            if any(_same(p, pid, ct) for pid, ct in vouched) or carries_session(p.pid, sid):
                out.append(p)
        except psutil.Error:
            continue
    return out


def wait_ports_free(ports: list[int], host: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    busy = list(ports)
    while busy and time.monotonic() < deadline:
        busy = [p for p in busy if not is_port_free(p, host)]
        if busy:
            time.sleep(0.1)
    return busy


def detach_adopted(reg: Registry, session: SessionEntry) -> str:
    """An adopted job was not started by rtdebug, so stopping it means leaving it as it was: every live
    rank's endpoint is closed and its stacks handler removed (by injection again); nothing is signalled."""
    sid = session["session_id"]
    live = [r for r in reg.ranks(sid) if reg.live_rank(r) and r["state"] in ATTACHABLE_STATES]
    method = inject.method_for(live[0]["pid"]) if live else "ptrace"
    answers = inject.detach_pids([r["pid"] for r in live], method, reg.ensure())  # answers in the registry
    now = time.time()
    reg.update_session(sid, state="stopped", ended_at=now)
    for r in reg.ranks(sid):
        if r["state"] in LIVE_RANK_STATES:
            reg.write_rank({**r, "state": "exited", "updated_at": now})
    failed = {p: a.get("error") or a["status"] for p, a in answers.items() if a.get("status") == "error"}
    if failed:
        pid, err = next(iter(failed.items()))
        raise HarnessError(f"session {sid}: could not detach pid {pid}: {err}")
    return f"rtdebug: session {sid} detached from {len(live)} ranks; the job runs on"


def stop_local_session(reg: Registry, session: SessionEntry) -> str:
    """End every process of ``session``, mark its entries, check its ports; return a one-line summary.
    An adopted session is detached instead (``detach_adopted``): its job was never rtdebug's to end."""
    sid = session["session_id"]
    recorded = reg.read_session(sid)  # this machine's own record, never what a merged view says
    if recorded is None:
        raise HarnessError(f"session {sid} has no readable registry entry on this machine; nothing signalled")
    session = recorded
    if session.get("mode") == "adopted":
        return detach_adopted(reg, session)
    ranks = reg.ranks(sid)
    procs = recorded_processes(session, ranks)
    launcher = next((p for p in procs if p.pid == session["launcher_pid"]), None)
    if launcher is not None:
        # first, alone: its own teardown stops torchrun and the ranks, or (``rtdebug run``) records the stop
        # and ends; signalled with the Ray workers its script started, a driver could see them die first
        # and exit 1 from a failed ray.get instead of by its signal
        processes.terminate([launcher], grace_s=20)
    left = [p for p in procs if p.is_running()]
    if left:
        processes.terminate(left, grace_s=5)
    busy = wait_ports_free(list(session["ports"]), session["host"])
    now = time.time()
    if reg.read_session(sid) is not None:
        reg.update_session(sid, state="stopped", ended_at=now)
        for r in reg.ranks(sid):
            if r["state"] in ("starting", "ready", "attached", "orphaned"):
                reg.write_rank({**r, "state": "exited", "updated_at": now})
    if busy:
        raise HarnessError(
            f"session {sid} stopped, but port {busy[0]} is still held by {port_holder(busy[0]) or 'an unknown process'}"
        )
    ports = session["ports"]
    span = f"ports {ports[0]}-{ports[-1]} free" if ports else "no ports"
    if session.get("mode") == "connected":  # only `connect` was signalled (its links die with it), never a rank
        host = str((session.get("connect") or {}).get("host") or "its node")
        return (
            f"rtdebug: disconnected session {sid} from {host} ({span}); the job runs on there "
            f"(`rtdebug stop --session {sid}` on {host} ends it)"
        )
    return f"rtdebug: stopped session {sid} ({len(procs)} process{'' if len(procs) == 1 else 'es'} ended, {span})"
