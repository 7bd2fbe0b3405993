"""What a node's ``rtdebug ps --json`` says, read as hostile input: bounded, checked field by field.

Whatever runs on the other machine (or in between) may print anything, so nothing is used until it passes:
the output's size and JSON shape, every session and rank entry's schema check
(``rtdebug.registry.entry.problem``), addresses and ports of the right form. Local entries are built from a
whitelist of the schema's rank fields only, so a remote entry can never add a field a local reader would
trust (no ``stacks`` FIFO names, no ``collectives`` file: those name the node's files). One line says
what was wrong.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.registry import collseq
from rtdebug.registry.entry import LIVE_SESSION_STATES, SCHEMA_VERSION, problem, valid_session_id

MAX_SESSIONS = 256
MAX_RANKS = 8192
HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,253})?")
PATH = re.compile(r"/[A-Za-z0-9_.,+@%=/ -]{0,4095}")
# rank fields copied to the local entry as they are, by JSON type
PLAIN: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("lazy", "wait", "debugpy_imported"), (bool,)),
    **dict.fromkeys(("attach_count", "refused_count", "node_rank"), (int,)),
    **dict.fromkeys(("script", "cwd", "hostname", "node_id", "actor_id", "job_id"), (str,)),
    **dict.fromkeys(("started_at", "updated_at"), (int, float)),
    "exit_code": (int, type(None)),
    "error": (str, type(None)),
}
STOP_KINDS = ("nonfinite", "disagree", "step")
DEBUG_STATES = ("running", "stopped", "paused", "pausing")
# session fields copied to the local entry, by JSON type
SESSION_PLAIN: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("script", "nnodes", "mode", "rdzv_id", "pg_timeout_source"), (str,)),
    "nproc_per_node": (int,),
    **dict.fromkeys(("started_at", "pg_timeout_s"), (int, float)),
}
# a rank's last collective (``ps --json``'s ``collective``: what ``ps`` shows in its COLLECTIVE column), by JSON type
COLLECTIVE: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("op", "state", "file", "func", "shapes", "dtype", "pg"), (str,)),
    **dict.fromkeys(("seq", "line"), (int,)),
    "since": (int, float),
}
MAX_TEXT = 4096  # characters of one copied text field (a path's limit): a longer one is dropped, never copied
ANY_ADDRESS = ("0.0.0.0", "::")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_address(text: object) -> bool:
    """An IP address or a host name (what a forward may name on the remote side)."""
    if not isinstance(text, str) or len(text) > 253:
        return False
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return HOSTNAME.fullmatch(text) is not None


def is_ip(text: object) -> bool:
    try:
        ipaddress.ip_address(text if isinstance(text, str) else "")
        return True
    except ValueError:
        return False


def split_store(text: object) -> tuple[str, int] | None:
    if not isinstance(text, str):
        return None
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not is_address(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


@dataclass(frozen=True)
class RemoteRank:
    rank: int
    host: str  # the address it listens on, as its node sees it
    port: int
    state: str
    node_rank: int
    node_ip: str | None
    pid: int
    entry: dict[str, Any]  # the whitelisted fields, for the local entry


@dataclass
class RemoteSession:
    session_id: str
    state: str
    verified: bool
    store: tuple[str, int] | None
    ranks: list[RemoteRank]
    nodes: dict[int, str] = field(default_factory=dict)  # node rank -> address
    home_node: int | None = None  # the node rank of the host that answered
    entry: dict[str, Any] = field(default_factory=dict)


@dataclass
class Listing:
    registry: str
    sessions: list[RemoteSession]


def _bad(where: str, why: str) -> HarnessError:
    return HarnessError(f"{where}: `rtdebug ps --json` printed {why}; not used")


def _meshes(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list) or len(value) > 16:
        return None
    out = []
    for m in value:
        if not isinstance(m, dict):
            return None
        dims, shape, coord = m.get("dims"), m.get("shape"), m.get("coord")
        ok = isinstance(dims, list) and all(isinstance(d, str) and len(d) <= 64 for d in dims) and len(dims) <= 8
        for nums in (shape, coord):
            ok = ok and isinstance(nums, list) and len(nums) <= 8
            ok = ok and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in nums or [])
        if not ok:
            return None
        one: dict[str, Any] = {"dims": dims, "shape": shape, "coord": coord}
        for k in ("groups", "descs"):
            texts = m.get(k)
            if isinstance(texts, list) and len(texts) <= 8 and all(isinstance(g, str) and len(g) <= 256 for g in texts):
                one[k] = m[k]
        out.append(one)
    return out


def _stop(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("kind") not in STOP_KINDS or not isinstance(value.get("reason"), str):
        return None
    out: dict[str, Any] = {"kind": value["kind"], "reason": value["reason"][:500]}
    if isinstance(value.get("origin"), bool) or value.get("origin") is None:
        out["origin"] = value.get("origin")
    if isinstance(value.get("step"), int) and not isinstance(value.get("step"), bool):
        out["step"] = value["step"]
    return out


def _collective(value: Any) -> dict[str, Any] | None:
    """The rank's last collective, every field of its type and printable, else None (left out)."""
    if not collseq.plausible(value):
        return None
    out = plain(value, COLLECTIVE)
    whole = len(out) == len(COLLECTIVE) and out["seq"] >= 1 and out["line"] >= 0
    return out if whole and not any(collseq.has_control(out[k]) for k in ("func", "shapes", "dtype")) else None


def _debug(value: Any) -> dict[str, Any] | None:
    """What the rank's debugger is doing (stopped at file:line, paused by all-stop ...: ``ps``'s STATE), each
    field of its type or None, else None (left out): the node's own word on where the rank stands."""
    if not isinstance(value, dict) or value.get("state") not in DEBUG_STATES:
        return None
    since = value.get("since")
    if not isinstance(since, (int, float)) or isinstance(since, bool) or not math.isfinite(since):
        return None
    out: dict[str, Any] = {"state": value["state"], "since": since}
    for k in ("reason", "file"):
        v = value.get(k)
        out[k] = v if isinstance(v, str) and len(v) <= MAX_TEXT and not collseq.has_control(v) else None
    for k in ("line", "by"):
        v = value.get(k)
        out[k] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    return out


def _rank(r: Any, sid: str, where: str) -> RemoteRank:
    why = problem(r, "rank")
    if why is not None:
        raise _bad(where, f"a rank entry that is not valid ({why})")
    if not is_address(r["host"]) or not 1 <= r["port"] <= 65535 or r["rank"] < 0:
        raise _bad(where, f"rank {r['rank']} with a bad address {str(r['host'])[:60]}:{r['port']}")
    node_ip = r.get("node_ip")
    if node_ip is not None and not is_address(node_ip):
        raise _bad(where, f"rank {r['rank']} with a bad node address {str(node_ip)[:60]!r}")
    entry: dict[str, Any] = {k: r[k] for k in ("rank", "world_size", "local_rank", "state", "pid")}
    entry["session_id"] = sid
    entry.update(plain(r, PLAIN))
    if (m := _meshes(r.get("meshes"))) is not None:
        entry["meshes"] = m
    if "stop" in r:
        entry["stop"] = _stop(r["stop"])
    if (coll := _collective(r.get("collective"))) is not None:
        entry["collective"] = coll
    if (debug := _debug(r.get("debug"))) is not None:
        entry["debug"] = debug
    node_rank = r["node_rank"] if _int(r.get("node_rank")) else 0
    return RemoteRank(r["rank"], r["host"], r["port"], r["state"], node_rank, node_ip, r["pid"], entry)


def plain(value: Mapping[str, Any], fields: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    """The ``fields`` of ``value`` that have their JSON type (a bool is no number), finite, and texts at most
    ``MAX_TEXT`` long: a forged field is left out, never copied into an entry a local reader trusts."""
    out: dict[str, Any] = {}
    for k, types in fields.items():
        v = value.get(k)
        if k not in value or not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            continue
        if isinstance(v, str) and len(v) > MAX_TEXT or isinstance(v, float) and not math.isfinite(v):
            continue
        out[k] = v
    return out


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nodes(raw: Any, ranks: list[RemoteRank], sid: str, where: str) -> tuple[dict[int, str], int | None]:
    """Node rank -> address, and the node rank of the host that answered (its own files name no node address)."""
    nodes: dict[int, str] = {}
    home = None
    for n in raw[:MAX_RANKS] if isinstance(raw, list) else []:
        if not isinstance(n, dict) or not _int(n.get("node_rank")):
            raise _bad(where, f"session {sid} with a node entry that is not valid")
        addr = n.get("node_ip") or n.get("host")
        if addr is not None and is_address(addr):
            nodes[n["node_rank"]] = addr
        if n.get("session_id") == sid:
            home = n["node_rank"]
    for r in ranks:  # a rank's own node address, where the node list has none
        if r.node_ip is not None:
            nodes.setdefault(r.node_rank, r.node_ip)
    if home is None:
        here = {r.node_rank for r in ranks if r.node_ip is None}
        every = {r.node_rank for r in ranks}
        home = here.pop() if len(here) == 1 else (every.pop() if len(every) == 1 else None)
    return nodes, home


def _session(s: Any, where: str) -> RemoteSession:
    why = problem(s, "session")
    if why is not None:
        raise _bad(where, f"a session entry that is not valid ({why})")
    sid = s["session_id"]
    raw_ranks = s.get("ranks", [])
    if not isinstance(raw_ranks, list) or len(raw_ranks) > MAX_RANKS:
        raise _bad(where, f"session {sid} with a rank list that is not a list of at most {MAX_RANKS}")
    ranks = [_rank(r, sid, where) for r in raw_ranks]
    if len({r.rank for r in ranks}) != len(ranks):
        raise _bad(where, f"session {sid} with one rank listed twice")
    store = None
    if s.get("store") is not None:
        store = split_store(s["store"])
        if store is None:
            raise _bad(where, f"session {sid} with a store address that is not HOST:PORT")
    nodes, home = _nodes(s.get("nodes", []), ranks, sid, where)
    keep = plain(s, SESSION_PLAIN)
    if s.get("mode") == "ray":
        _ray_ranks(ranks, sid, where)
        if valid_session_id(s.get("parent_session")):
            keep["parent_session"] = s["parent_session"]
    return RemoteSession(sid, s["state"], s.get("verified") is not False, store, ranks, nodes, home, keep)


def _ray_ranks(ranks: list[RemoteRank], sid: str, where: str) -> None:
    """A Ray Train worker names its node by IP (the address ``connect`` opens a link to) and listens on
    loopback or on that IP: anything else would make ``connect`` forward to somewhere else."""
    for r in ranks:
        if not is_ip(r.node_ip):
            raise _bad(where, f"Ray session {sid}'s rank {r.rank} without a node IP address")
        if r.host not in (*LOOPBACK, *ANY_ADDRESS, r.node_ip):
            raise _bad(where, f"Ray session {sid}'s rank {r.rank} listening on {r.host[:60]}, not on its node")


def parse(raw: bytes, where: str) -> Listing:
    """The live sessions a node's ``rtdebug ps --json`` lists (a one-line ``HarnessError`` for anything else)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise _bad(where, "something that is not JSON" if raw.strip() else "nothing") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise _bad(where, f"something that is not a schema-{SCHEMA_VERSION} listing (another rtdebug version?)")
    registry, sessions = data.get("registry"), data.get("sessions")
    if not isinstance(registry, str) or not PATH.fullmatch(registry) or ".." in registry.split("/"):
        raise _bad(where, "a registry path that is not a plain absolute path")
    if not isinstance(sessions, list) or len(sessions) > MAX_SESSIONS:
        raise _bad(where, f"a session list that is not a list of at most {MAX_SESSIONS}")
    out = [_session(s, where) for s in sessions]
    return Listing(registry, [s for s in out if s.state in LIVE_SESSION_STATES])


def choose_ray(listing: Listing, session_id: str | None, where: str, address: str) -> RemoteSession:
    """The named Ray Train run (mode ``ray``: ``<id>-ray1``), else the newest verified one the cluster lists;
    one line if there is none (the node's own sessions, which ``ps`` lists beside them, are not runs)."""
    runs = Listing(listing.registry, [s for s in listing.sessions if s.entry.get("mode") == "ray"])
    if not runs.sessions:
        raise HarnessError(
            f"no rtdebug-armed Ray Train run in the Ray cluster at {address} (as {where} reaches it): "
            f"start it with `rtdebug run --ray-address {address} train.py` (docs/ray-clusters.md)"
        )
    if session_id is not None and valid_session_id(session_id):
        if not any(s.session_id == session_id for s in runs.sessions):
            raise HarnessError(
                f"no live Ray Train run {session_id!r} in the Ray cluster at {address}; "
                f"see `ssh {where} rtdebug ps --ray-address {address}`"
            )
    return choose(runs, session_id, f"the Ray cluster at {address}")


def choose(listing: Listing, session_id: str | None, where: str) -> RemoteSession:
    """The named session, else the newest verified one there (as ``ps`` chooses); one line if none."""
    if session_id is not None:
        if not valid_session_id(session_id):
            raise HarnessError(f"invalid session id {session_id[:80]!r}", 2)
        for s in listing.sessions:
            if s.session_id == session_id:
                return s
        raise HarnessError(f"no live rtdebug session {session_id!r} on {where}; see `ssh {where} rtdebug ps`")
    trusted = [s for s in listing.sessions if s.verified]
    if not trusted:
        if listing.sessions:
            raise HarnessError(
                f"{where} lists only unverified sessions ({', '.join(s.session_id for s in listing.sessions[:3])}); "
                "name one with --session to use it anyway"
            )
        raise HarnessError(f"no live rtdebug session on {where}")
    return max(trusted, key=lambda s: float(s.entry.get("started_at", 0) or 0))
