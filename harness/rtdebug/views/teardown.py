"""``rtdebug stop`` for a session started on this machine: its whole process tree, then its ports.

Only processes the registry can vouch for are signalled: a recorded pid counts
only while its create time matches (pids get reused), and their descendants
come with them. A live launcher is asked first (its own teardown stops torchrun
and records the end); an orphaned session (launcher gone) has its agent and
ranks ended directly, whatever its entry says.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from rtdebug.common import processes
from rtdebug.common.errors import HarnessError
from rtdebug.common.ports import is_port_free, port_holder
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.files import Registry

Entry = dict[str, Any]


def recorded_processes(session: Entry, ranks: list[Entry]) -> list[psutil.Process]:
    """The session's launcher, torchrun agent and ranks that are still the processes recorded, with children."""
    pids = []
    if is_alive(session["launcher_pid"], session["launcher_create_time"]):
        pids.append(session["launcher_pid"])
    agent, agent_ct = session.get("agent_pid"), session.get("agent_create_time")
    if isinstance(agent, int) and isinstance(agent_ct, (int, float)) and is_alive(agent, agent_ct):
        pids.append(agent)
    pids += [r["pid"] for r in ranks if is_alive(r["pid"], r["create_time"])]
    return processes.tree(pids)


def wait_ports_free(ports: list[int], host: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    busy = list(ports)
    while busy and time.monotonic() < deadline:
        busy = [p for p in busy if not is_port_free(p, host)]
        if busy:
            time.sleep(0.1)
    return busy


def stop_local_session(reg: Registry, session: Entry) -> str:
    """End every process of ``session``, mark its entries, check its ports; return a one-line summary."""
    sid = session["session_id"]
    ranks = reg.ranks(sid)
    procs = recorded_processes(session, ranks)
    launcher = next((p for p in procs if p.pid == session["launcher_pid"]), None)
    if launcher is not None and session["mode"] == "torchrun":
        processes.terminate([launcher], grace_s=20)  # its own teardown stops torchrun and the ranks
    left = [p for p in procs if p.is_running()]
    if left:
        processes.terminate(left, grace_s=5)
    busy = wait_ports_free(list(session["ports"]), session["host"])
    now = time.time()
    if reg.read_session(sid) is not None:
        reg.update_session(sid, state="stopped", ended_at=now)
        for r in reg.ranks(sid):
            if r["state"] in ("starting", "ready", "attached", "orphaned"):
                reg.write_rank(dict(r, state="exited", updated_at=now))
    if busy:
        raise HarnessError(
            f"session {sid} stopped, but port {busy[0]} is still held by {port_holder(busy[0]) or 'an unknown process'}"
        )
    ports = session["ports"]
    span = f"ports {ports[0]}-{ports[-1]} free" if ports else "no ports"
    return f"rtdebug: stopped session {sid} ({len(procs)} processes ended, {span})"
