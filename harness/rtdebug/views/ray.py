"""The Ray view: Ray Train workers' ranks (``num_workers > 0``), read from the cluster's GCS.

Workers register themselves (``rtdebug.rank.ray_worker``) in the GCS internal KV;
this view reads those entries with a bare GCS client, from any machine that can
reach the cluster: ``--ray-address``/``RAY_ADDRESS``, else the cluster a live
local ``rtdebug run`` session recorded (its driver learns the address when its
trainer starts), so ``ps`` next to the driver needs no flag.

Liveness comes from Ray itself: a session lives while its driver's job is not
dead (and, on the driver's machine, while the driver pid is the same process);
a rank lives while its node is alive (and, on this machine, its pid). Dead
entries are deleted as they are found. A worker-group restart overwrites each
rank's entry with the new worker's pid.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.files import LIVE_RANK_STATES, LIVE_SESSION_STATES, Registry

Entry = dict[str, Any]
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


class RayView:
    """Sessions registered in one Ray cluster's GCS."""

    def __init__(self, address: str) -> None:
        from rtdebug.registry.ray_kv import ClientKV

        self.address = address
        self.label = f"ray {address}"
        self.kv = ClientKV(address)

    def _liveness(self) -> tuple[set[str], set[str]]:
        """Hex ids of the cluster's live jobs and alive nodes."""
        gcs = self.kv.gcs
        jobs = {j.hex() for j, info in gcs.get_all_job_info(timeout=self.kv.timeout).items() if not info.is_dead}
        nodes = {n.hex() for n, info in gcs.get_all_node_info(timeout=self.kv.timeout).items() if info.state == 0}
        return jobs, nodes

    def _session_live(self, s: Entry, jobs: set[str]) -> bool:
        if s.get("state") not in LIVE_SESSION_STATES or s.get("ray_job_id") not in jobs:
            return False
        if s.get("driver_hostname") == socket.gethostname():
            return is_alive(s["launcher_pid"], s["launcher_create_time"])
        return True

    @staticmethod
    def _rank_live(r: Entry, nodes: set[str]) -> bool:
        if r.get("node_id") not in nodes:
            return False
        if r.get("hostname") == socket.gethostname():
            return is_alive(r["pid"], r["create_time"])
        return True

    def _collect(self, only: str | None = None) -> list[Entry]:
        try:
            jobs, nodes = self._liveness()
            sessions = self.kv.sessions()
            ranks = self.kv.ranks()
        except Exception as exc:  # RpcError and friends: the cluster went away mid-read
            raise HarnessError(f"cannot read the Ray cluster at {self.address}: {exc}") from None
        out = []
        live_ids = set()
        for s in sessions:
            sid = s["session_id"]
            if not self._session_live(s, jobs):
                self.kv.delete_session(sid)
                continue
            live_ids.add(sid)
            if only is not None and sid != only:
                continue
            mine = []
            for r in (r for r in ranks if r.get("session_id") == sid):
                if r.get("state") in LIVE_RANK_STATES and not self._rank_live(r, nodes):
                    self.kv.delete_rank(sid, r["rank"])
                    continue
                mine.append(r)
            out.append(dict(s, ranks=sorted(mine, key=lambda r: r["rank"]), source=self.label))
        for r in ranks:  # a rank whose session entry is gone belongs to an ended run
            if r.get("session_id") not in live_ids and not any(
                s["session_id"] == r.get("session_id") for s in sessions
            ):
                self.kv.delete_rank(r["session_id"], r["rank"])
        return out

    def sessions(self) -> list[Entry]:
        return self._collect()

    def session(self, session_id: str) -> Entry | None:
        found = self._collect(only=session_id)
        return found[0] if found else None

    def stop(self, session: Entry) -> str:
        """End the run by ending its driver (Ray then ends the job's workers); check the ports are free."""
        from rtdebug.common import processes
        from rtdebug.views.teardown import wait_ports_free

        sid = session["session_id"]
        here = socket.gethostname()
        if session.get("driver_hostname") != here:
            raise HarnessError(
                f"session {sid}'s driver runs on {session.get('driver_hostname')}; stop it there "
                f"(`rtdebug stop --session {session.get('parent_session', sid)}`)"
            )
        ranks = [r for r in session["ranks"] if r.get("hostname") == here and is_alive(r["pid"], r["create_time"])]
        driver = []
        if is_alive(session["launcher_pid"], session["launcher_create_time"]):
            driver = processes.tree([session["launcher_pid"]])
        if driver:
            processes.terminate(driver, grace_s=20)
        deadline = time.monotonic() + STOP_GRACE_S
        left = ranks
        while left and time.monotonic() < deadline:
            left = [r for r in left if is_alive(r["pid"], r["create_time"])]
            time.sleep(0.2)
        if left:  # Ray did not end them: they are this job's workers on this machine
            import psutil

            procs = []
            for r in left:
                try:
                    procs.append(psutil.Process(r["pid"]))
                except psutil.Error:
                    pass
            processes.terminate(procs, grace_s=5)
        ports = [r["port"] for r in session["ranks"] if r.get("hostname") == here]
        busy = wait_ports_free(ports, session.get("host", "127.0.0.1"))
        try:
            self.kv.delete_session(sid)
        except Exception:
            pass  # the cluster may have gone with the driver (a cluster the script started)
        if busy:
            raise HarnessError(f"session {sid} stopped, but port {busy[0]} is still held")
        span = f"ports {min(ports)}-{max(ports)} free" if ports else "no ports on this machine"
        return (
            f"rtdebug: stopped session {sid} (driver pid {session['launcher_pid']} and "
            f"{len(ranks)} Ray workers ended, {span})"
        )


class MultiRayView:
    """The clusters that live local ``rtdebug run`` sessions recorded, as one view."""

    def __init__(self, views: list[RayView]) -> None:
        self.views = views
        self.label = "ray " + ",".join(v.address for v in views)

    def sessions(self) -> list[Entry]:
        out = []
        for v in self.views:
            try:
                out += [dict(s, source=self.label) for s in v.sessions()]
            except HarnessError:
                continue  # an auto-found cluster that ended with its driver
        return out

    def session(self, session_id: str) -> Entry | None:
        for v in self.views:
            try:
                s = v.session(session_id)
            except HarnessError:
                continue
            if s is not None:
                return dict(s, source=self.label)
        return None

    def stop(self, session: Entry) -> str:
        return RayView(session["ray_address"]).stop(session)


def recorded_addresses() -> list[str]:
    out: list[str] = []
    try:
        sessions = list(Registry().sessions())
    except OSError:
        return out
    for s in sessions:
        addr = s.get("ray_address")
        if addr and s.get("state") in LIVE_SESSION_STATES and addr not in out:
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
    return MultiRayView([RayView(a) for a in found]) if found else None
