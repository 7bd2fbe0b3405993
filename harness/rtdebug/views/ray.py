"""The Ray view: Ray Train workers' ranks (``num_workers > 0``), read from the cluster's GCS.

Workers register themselves (``rtdebug.rank.ray_worker``) in the GCS internal KV;
this view reads those entries with a bare GCS client, from any machine that can
reach the cluster: ``--ray-address``/``RAY_ADDRESS``, else the cluster a live
local ``rtdebug run`` session recorded (its driver learns the address when its
trainer starts), so ``ps`` next to the driver needs no flag.

Liveness comes from Ray itself: a session lives while its driver's job is not
dead (and, where the driver's pids are this process's pids, while the driver pid
is the same process); a rank lives while its node is alive (and, where its pids
are ours, its pid). "Where its pids are ours" is the entry's ``machine`` (the
kernel's boot and the pid namespace, ``procinfo.machine_id``), never a hostname:
a laptop named as a node is must not judge, and delete, that node's live
entries by pids of its own. Dead entries are deleted as they are found. A
worker-group restart overwrites each rank's entry with the new worker's pid.

Anyone who reaches the GCS can write the KV: entries are checked and marked
``verified`` (``rtdebug.views.remote``), and no pid read here is ever signalled.
``stop`` ends the run through the driver's own ``rtdebug run`` session on this
machine (its registry files), and only for an entry signed with that session's
secret; Ray then ends the workers.
"""

from __future__ import annotations

import socket
from typing import Any

from rtdebug.common import log
from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import is_alive, machine_id
from rtdebug.registry import signing
from rtdebug.registry.entry import LIVE_RANK_STATES, LIVE_SESSION_STATES, valid_session_id
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import ListedSession, RankEntry, SessionEntry
from rtdebug.views.remote import MultiView, check, claims_local, local_trust

CONNECT_TIMEOUT_S = 3.0
STOP_GRACE_S = 30.0


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise HarnessError(f"--ray-address {address!r}: expected the cluster's GCS address HOST:PORT")
    return host.strip("[]"), int(port)


def _reachable(address: str) -> bool:
    try:
        with socket.create_connection(split_address(address), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def pids_are_ours(machine: object) -> bool:
    """Whether an entry's pids name this machine's processes (its ``machine`` is ours; absent: never)."""
    here = machine_id()
    return bool(here) and machine == here


class RayView:
    """Sessions registered in one Ray cluster's GCS."""

    def __init__(self, address: str, trust: tuple[list[str], frozenset[str]] | None = None) -> None:
        from rtdebug.registry.ray_kv import ClientKV

        self.address = address
        self.label = f"ray {address}"
        self.kv = ClientKV(address)
        self.known, self.local_ids = local_trust() if trust is None else trust
        self.skipped: dict[str, str] = {}  # KV key -> why its value is not a valid entry

    def _liveness(self) -> tuple[set[str], set[str]]:
        """Hex ids of the cluster's live jobs and alive nodes."""
        gcs = self.kv.gcs
        jobs = {j.hex() for j, info in gcs.get_all_job_info(timeout=self.kv.timeout).items() if not info.is_dead}
        nodes = {n.hex() for n, info in gcs.get_all_node_info(timeout=self.kv.timeout).items() if info.state == 0}
        return jobs, nodes

    def _session_live(self, s: SessionEntry, jobs: set[str]) -> bool:
        if s.get("state") not in LIVE_SESSION_STATES or s.get("ray_job_id") not in jobs:
            return False
        if pids_are_ours(s.get("driver_machine")):
            return is_alive(s["launcher_pid"], s["launcher_create_time"])
        return True

    @staticmethod
    def _rank_live(r: RankEntry, nodes: set[str]) -> bool:
        if r.get("node_id") not in nodes:
            return False
        if pids_are_ours(r.get("machine")):
            return is_alive(r["pid"], r["create_time"])
        return True

    def _misplaced(self, key: str, entry: SessionEntry | RankEntry, own: str) -> str | None:
        """Why a valid entry at ``key`` may not be used (it is not stored under its own key ``own``, or it
        claims a session of this machine); None if it may."""
        return claims_local(entry, self.local_ids) if own == key else "it is not stored under its own key"

    def _entries(self) -> tuple[dict[str, SessionEntry], dict[str, list[RankEntry]]]:
        """Valid session entries by id and rank entries by session id; the rest goes to ``skipped``."""
        from rtdebug.registry.ray_kv import parse, rank_key, session_key

        sessions: dict[str, SessionEntry] = {}
        ranks: dict[str, list[RankEntry]] = {}
        for key, value in self.kv.raw("session/").items():
            s, why = check(key, parse(value), "session", self.known)
            why = why if s is None else self._misplaced(key, s, session_key(s["session_id"]))
            if s is None or why is not None:
                self.skipped[key] = str(why)
            else:
                sessions[s["session_id"]] = s
        for key, value in self.kv.raw("rank/").items():
            r, why = check(key, parse(value), "rank", self.known)
            why = why if r is None else self._misplaced(key, r, rank_key(r["session_id"], r["rank"]))
            if r is None or why is not None:
                self.skipped[key] = str(why)
            else:
                ranks.setdefault(r["session_id"], []).append(r)
        return sessions, ranks

    def _collect(self, only: str | None = None) -> list[ListedSession]:
        from rtdebug.registry.ray_kv import rank_key

        try:
            jobs, nodes = self._liveness()
            sessions, ranks = self._entries()
        except Exception as exc:  # RpcError and friends: the cluster went away mid-read
            raise HarnessError(f"cannot read the Ray cluster at {self.address}: {exc}") from None
        out: list[ListedSession] = []
        for sid, s in sessions.items():
            if not self._session_live(s, jobs):
                self.kv.delete_session(sid)
                continue
            if only is not None and sid != only:
                continue
            mine = []
            for r in ranks.get(sid, []):
                if r.get("state") in LIVE_RANK_STATES and not self._rank_live(r, nodes):
                    self.kv.delete_key(rank_key(sid, r["rank"]))
                    continue
                mine.append(r)
            out.append({**s, "ranks": sorted(mine, key=lambda r: r["rank"]), "source": self.label})
        for sid, orphans in ranks.items():  # a rank whose session entry is gone belongs to an ended run
            if sid not in sessions:
                for r in orphans:
                    self.kv.delete_key(rank_key(sid, r["rank"]))
        return out

    def sessions(self) -> list[ListedSession]:
        return self._collect()

    def session(self, session_id: str) -> ListedSession | None:
        found = self._collect(only=session_id)
        return found[0] if found else None

    def _driver_session(self, session: SessionEntry) -> tuple[Registry, SessionEntry]:
        """This machine's own ``rtdebug run`` session that started the run, vouched for by its secret."""
        from rtdebug.registry.ray_kv import parse, session_key

        sid, parent = session["session_id"], str(session.get("parent_session"))
        reg = Registry()
        local = reg.read_session(parent) if valid_session_id(parent) else None
        if local is None:
            raise HarnessError(
                f"session {sid} names no `rtdebug run` session of this machine as its driver; "
                f"nothing signalled (stop its driver where it runs)"
            )
        key = session_key(sid)
        raw = parse(self.kv.raw(key).get(key, b"null"))
        secret = signing.read_secret(reg.session_dir(parent))
        if not isinstance(raw, dict) or not secret or not signing.verify(key, raw, [secret]):
            raise HarnessError(
                f"session {sid} is not signed by this machine's session {parent} (a forged or foreign Ray KV "
                f"entry?); nothing signalled. `rtdebug stop --session {parent}` stops that session"
            )
        return reg, local

    def stop(self, session: ListedSession) -> str:
        """End the run by stopping its driver's own session (Ray then ends the job's workers); check the
        ports of its workers on this machine are free. No pid from the KV is signalled."""
        from rtdebug.views.local import LocalView
        from rtdebug.views.teardown import wait_ports_free

        sid = session["session_id"]
        reg, local = self._driver_session(session)
        parent = local["session_id"]
        if local["state"] not in LIVE_SESSION_STATES and local["state"] != "orphaned":
            return f"rtdebug: session {sid} ended with its driver's session {parent} ({local['state']})"
        done = LocalView(reg).stop(local)
        here = socket.gethostname()
        ports = [r["port"] for r in session["ranks"] if r.get("hostname") == here and r.get("verified")]
        busy = wait_ports_free(ports, session.get("host", "127.0.0.1"), timeout=STOP_GRACE_S)
        try:
            self.kv.delete_session(sid)
        except Exception:
            log.swallowed("views.ray: stop: going on")
            pass  # the cluster may have gone with the driver (a cluster the script started)
        if busy:
            raise HarnessError(f"session {sid} stopped, but port {busy[0]} is still held")
        span = f"ports {min(ports)}-{max(ports)} free" if ports else "no worker ports on this machine"
        ended = done.removeprefix("rtdebug: ")
        return f"rtdebug: stopped session {sid} through its driver's session {parent} ({span}); {ended}"


class MultiRayView(MultiView):
    """The clusters that live local ``rtdebug run`` sessions recorded, as one view."""

    gone = "session"

    def __init__(self, views: list[RayView]) -> None:
        super().__init__(views)
        self.label = "ray " + ",".join(v.address for v in views)


def recorded_addresses() -> list[str]:
    out: list[str] = []
    try:
        sessions = list(Registry().sessions())
    except OSError:
        return out
    for s in sessions:
        addr = s.get("ray_address")  # (a connected run's forwarded GCS is for its `stacks`: its files list it)
        if addr and s.get("mode") != "connected" and s.get("state") in LIVE_SESSION_STATES and addr not in out:
            if is_alive(s["launcher_pid"], s["launcher_create_time"]):
                out.append(addr)
    return out


def open_view(opts: Any) -> RayView | MultiRayView | None:
    """``--ray-address``/``RAY_ADDRESS`` (errors if unreachable), else the clusters live local runs recorded."""
    explicit = getattr(opts, "ray_address", None)
    if explicit:
        if not _reachable(explicit):
            raise HarnessError(f"cannot reach the Ray cluster's GCS at {explicit} (--ray-address / RAY_ADDRESS)")
        return RayView(explicit)
    found = [a for a in recorded_addresses() if _reachable(a)]
    if not found:
        return None
    trust = local_trust()
    return MultiRayView([RayView(a, trust) for a in found])
