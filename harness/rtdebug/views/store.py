"""The store view: every rank of a multi-node torchrun job, read from the job's own store.

The ranks publish their entries there (``rtdebug.rank.publish``); this module reads
them back from any machine that can reach the store (``--store HOST:PORT`` or
``RTDEBUG_STORE``, else the store recorded by a live local session, so ``ps`` on
any node of the job finds every rank without a flag). One session per job, named
by the session id of this machine's own launcher of that job (so it merges with
this machine's files into one session), else by node 0's; any node's id finds it.

A rank is "lost" (shown ``failed``) when its heartbeat falls behind the job's
logical clock (``c10d.rounds_behind``): its node died without saying so.
When the store itself is gone the job has ended (torchrun's agent hosts it); an
explicit ``--store`` then fails with one line, an auto-found one is skipped. Read with the torch-free
client (``rtdebug.registry.tcpstore``): a requester never pays torch's import, nor needs torch at all.

Anyone who reaches the store can write it: every entry passes the registry's schema check (else it is
skipped and named), and is ``verified`` only when signed with a job secret this reader knows
(``rtdebug.views.remote``); a job is verified when all its entries are. An unverified entry may not
claim one of this machine's sessions. ``stop`` only sets the job's stop key: each node's own launcher
ends its own processes; no pid from the store is ever signalled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtdebug.common.addresses import is_own
from rtdebug.common.errors import HarnessError
from rtdebug.registry import c10d
from rtdebug.registry.entry import LIVE_RANK_STATES, without
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import ListedSession, NodeInfo, RankEntry, SessionEntry, SessionState
from rtdebug.registry.tcpstore import TCPStoreClient
from rtdebug.views.remote import MultiView, check, claims_local, local_trust

READ_TIMEOUT_S = 5.0


def connect_host(rank: RankEntry, is_local: Callable[[str], bool] = is_own) -> tuple[str, str | None]:
    """The address a client here should connect to for ``rank``, and a note when that needs a tunnel.

    A rank bound to 0.0.0.0 is reached at its node's address; one bound to loopback on another
    machine is reachable only through a tunnel to that node, which the note spells out."""
    host, node_ip = rank.get("host", "127.0.0.1"), rank.get("node_ip")
    if host in ("0.0.0.0", "::") and node_ip:
        return node_ip, None
    if host in ("127.0.0.1", "localhost", "::1") and node_ip:
        if not is_local(node_ip):
            where = rank.get("hostname") or node_ip
            return host, (
                f"rank {rank['rank']} listens on {host} of node {node_ip} ({where}): open a tunnel first, "
                f"`ssh -N -L {rank['port']}:127.0.0.1:{rank['port']} {node_ip}`, or restart the job with "
                f"--debug-host auto --debug-allow <your address>"
            )
    return host, None


def _entry_key(key: str) -> bool:
    parts = key.rsplit("/", 2)
    return key.startswith(c10d.PREFIX + "/") and len(parts) == 3 and parts[1] in ("rank", "node")


NODE_ONLY = ("heartbeat", "tick", "ranks", "source", "hostname", "node_ip")  # not the session's own fields


@dataclass
class Job:
    """One torchrun job's entries in the store: its ranks by global rank, its nodes by group rank."""

    run_id: str
    ranks: dict[int, RankEntry] = field(default_factory=dict)
    nodes: dict[int, SessionEntry] = field(default_factory=dict)


def _ranks(job: Job) -> list[RankEntry]:
    """The job's rank entries as a client needs them; a rank that fell behind the job's clock is lost."""
    behind = c10d.rounds_behind(list(job.ranks.values()))
    out = []
    for n in sorted(job.ranks):
        r = without(job.ranks[n], ("heartbeat", "tick", "launcher_pid"))
        if r.get("host") in ("0.0.0.0", "::") and r.get("node_ip"):
            r["host"] = r["node_ip"]  # bound to every address: a client reaches it at its node's
        if behind.get(n, 0) > c10d.LOST_ROUNDS:
            silent = behind[n] * c10d.HEARTBEAT_S
            where = r.get("node_ip", "?")
            r["state"] = "failed"
            r["error"] = f"lost: not heard from for ~{silent:.0f}s (its node {where} is gone?)"
        out.append(r)
    return out


def _node(group_rank: int, e: SessionEntry) -> NodeInfo:
    published: Mapping[str, Any] = e  # a node's entry in the store says where it runs too (``NODE_ONLY``)
    return NodeInfo(
        node_rank=group_rank,
        host=e.get("host"),
        node_ip=published.get("node_ip"),
        hostname=published.get("hostname"),
        session_id=e.get("session_id"),
        launcher_pid=e.get("launcher_pid"),
    )


def _job_state(ranks: list[RankEntry]) -> SessionState:
    if any(r.get("state") in LIVE_RANK_STATES for r in ranks):
        return "running"
    return "failed" if any(r.get("state") == "failed" for r in ranks) else "exited"


class StoreView:
    """Sessions of the jobs that publish into one c10d store."""

    def __init__(
        self,
        host: str,
        port: int,
        explicit: bool = True,
        local_ids: frozenset[str] = frozenset(),
        trust: tuple[list[str], frozenset[str]] | None = None,
    ) -> None:
        self.host, self.port, self.explicit, self.local_ids = host, port, explicit, local_ids
        self.label = f"store {host}:{port}"
        self._store: TCPStoreClient | None = None  # one client per view: `attach` polls it
        self.known, self.trusted_ids = local_trust() if trust is None else trust
        self.skipped: dict[str, str] = {}  # key -> why its value is not a valid record

    # -- reading ------------------------------------------------------------
    def client(self) -> TCPStoreClient:
        """The view's one store connection (``ps``, ``attach``'s polls and job-wide ``stacks`` share it);
        connecting is the reachability probe: the torch-free client fails at once and quietly."""
        if self._store is None:
            try:
                self._store = TCPStoreClient(self.host, self.port, READ_TIMEOUT_S)
            except OSError:
                raise HarnessError(
                    f"cannot reach the job store at {self.host}:{self.port}: the job has ended "
                    f"(torchrun's agent hosts its store) or the address is wrong"
                ) from None
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _raw(self, retry: bool = True) -> dict[str, Any]:
        try:
            store = self.client()
        except HarnessError:
            if self.explicit:
                raise
            return {}
        try:
            keys = [k for k in store.list_keys() if _entry_key(k)]  # never the (big) dump answers
            values = store.multi_get(keys) if keys else []
        except Exception as exc:  # the store went away (the job ended) since the last read
            self.close()
            if retry:
                return self._raw(retry=False)  # a new connection says why the usual way
            if self.explicit:
                raise HarnessError(
                    f"the job store at {self.host}:{self.port} stopped answering: "
                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                ) from None
            return {}
        out: dict[str, Any] = {}
        for key, value in zip(keys, values, strict=False):
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = None  # not JSON: named as skipped if its key is an entry's
        return out

    def _jobs(self) -> dict[str, Job]:
        """Every job that publishes here, by run id; entries that are not valid records are skipped."""
        jobs: dict[str, Job] = {}
        for key, entry in self._raw().items():
            parts = key[len(c10d.PREFIX) + 1 :].rsplit("/", 2)  # a run id may contain "/"
            if len(parts) != 3 or parts[1] not in ("rank", "node") or not parts[2].isdigit():
                continue  # the job's tick and stop keys
            run_id, kind, n = parts[0], parts[1], int(parts[2])
            if kind == "rank":
                rank, why = check(key, entry, "rank", self.known)
                if rank is not None:
                    why = claims_local(rank, self.trusted_ids)
                    if rank["rank"] != n:
                        why = f"its rank {rank['rank']} is not the one its key names"
                if rank is not None and why is None:
                    jobs.setdefault(run_id, Job(run_id)).ranks[n] = rank
            else:
                node, why = check(key, entry, "session", self.known)
                if node is not None:
                    why = claims_local(node, self.trusted_ids)
                if node is not None and why is None:
                    jobs.setdefault(run_id, Job(run_id)).nodes[n] = node
            if why is not None:
                self.skipped[key] = why
        return jobs

    def _session(self, job: Job) -> ListedSession | None:
        """One session per job: node 0's entry, the job's nodes and ranks, named as this machine knows it."""
        if not job.nodes:
            return None  # no node entry yet: its local rank 0 has not published
        ranks = _ranks(job)
        nodes = [_node(g, job.nodes[g]) for g in sorted(job.nodes)]
        sid = self._session_id(job.run_id, nodes)
        base = without(job.nodes[min(job.nodes)], NODE_ONLY)
        verified = all(e["verified"] for e in [*job.nodes.values(), *job.ranks.values()])
        ports = sorted({p for e in job.nodes.values() for p in e.get("ports", []) if isinstance(p, int)})
        return {
            **base,
            "session_id": sid,
            "node_rank": None,
            "ports": ports or base.get("ports", []),
            "nodes": nodes,
            "state": _job_state(ranks),
            "store": f"{self.host}:{self.port}",
            "rdzv_id": job.run_id,
            "ranks": [{**r, "session_id": sid} for r in ranks],
            "source": self.label,
            "verified": verified,
            "updated_at": max([base.get("updated_at", 0), *(r.get("updated_at", 0) for r in ranks)]),
        }

    def _session_id(self, run_id: str, nodes: list[NodeInfo]) -> str:
        """This machine's own launcher's id for the job (so it merges with the local files), else node 0's."""
        ids = [n["session_id"] for n in nodes if n["session_id"]]
        return next((i for i in ids if i in self.local_ids), ids[0] if ids else run_id)

    def sessions(self) -> list[ListedSession]:
        out = []
        for job in self._jobs().values():
            s = self._session(job)
            if s is not None:
                out.append(s)
        return out

    def session(self, session_id: str) -> ListedSession | None:
        """The job that ``session_id`` (the id any of its nodes' launchers printed) belongs to."""
        for s in self.sessions():
            if session_id == s["session_id"] or session_id in [n["session_id"] for n in s["nodes"]]:
                return {**s, "session_id": session_id, "ranks": [{**r, "session_id": session_id} for r in s["ranks"]]}
        return None

    def stop(self, session: SessionEntry) -> str:
        """Ask every rank, through the store, to stop its own node's launcher (graceful teardown)."""
        run_id = session.get("rdzv_id")
        if not isinstance(run_id, str):
            raise HarnessError(f"session {session['session_id']} records no rendezvous id to stop it by")
        try:
            self.client().set(c10d.stop_key(run_id), b"1")
        except Exception as exc:
            raise HarnessError(f"cannot reach the job store at {self.host}:{self.port}: {exc}") from None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                s = self.session(session["session_id"])
            except HarnessError:
                s = None  # the store is gone with the job
            if s is None or s["state"] != "running":
                return (
                    f"rtdebug: stopped job {session['session_id']} on {len(session.get('nodes', []))} "
                    f"node(s) through the store at {self.host}:{self.port}"
                )
        raise HarnessError(f"job {session['session_id']} asked to stop, but ranks still run after 60s")


def open_view(opts: Any) -> StoreView | MultiStoreView | None:
    """``--store``/``RTDEBUG_STORE`` (errors if unreachable), else the stores live local sessions record."""
    if getattr(opts, "store", None):
        try:
            host, port = c10d.split_endpoint(opts.store)
        except ValueError:
            raise HarnessError(f"--store {opts.store!r}: expected HOST:PORT") from None
        return StoreView(host, port, explicit=True, local_ids=frozenset(_recorded_stores().values()))
    found = _recorded_stores()
    if not found:
        return None
    ids, trust = frozenset(found.values()), local_trust()
    return MultiStoreView([StoreView(h, p, explicit=False, local_ids=ids, trust=trust) for h, p in found])


def _recorded_stores() -> dict[tuple[str, int], str]:
    """(host, port) of the store of each live local session of a multi-node job -> its session id."""
    out: dict[tuple[str, int], str] = {}
    try:
        sessions = list(Registry().sessions())
    except OSError:
        return out
    for s in sessions:
        if s.get("store") and s.get("state") in ("starting", "running"):
            out.setdefault(c10d.split_endpoint(s["store"]), s["session_id"])
    return out


class MultiStoreView(MultiView):
    """The stores recorded by this machine's live sessions, as one view."""

    gone = "job"

    def __init__(self, views: list[StoreView]) -> None:
        super().__init__(views)
        self.label = "store " + ",".join(f"{v.host}:{v.port}" for v in views)
