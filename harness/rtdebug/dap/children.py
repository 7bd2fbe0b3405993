"""Which ranks of a session become child sessions, under what names, with what configuration.

A child is announced once per rank process: a rank that restarts (torchrun's ``--max-restarts``, an elastic
job) is a new process, so a new child. A rank is announced when a client could attach to it (``ready`` or
``attached``; a failed rank still waiting for a post-mortem client too), the way ``rtdebug attach`` waits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rtdebug.common import selector
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import parse_rank_list
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.entry import ATTACHABLE_STATES, LIVE_SESSION_STATES
from rtdebug.registry.liveness import judge
from rtdebug.registry.schema import ListedSession, RankEntry
from rtdebug.registry.table import debug_state
from rtdebug.views.api import Views

RankKey = tuple[int, int, float, int]  # (rank, pid, create time, port): one rank process, where it listens
# the parent's attach arguments a child must not inherit (as debugpy's adapter drops them for a subprocess)
NOT_INHERITED = ("processId", "listen", "preLaunchTask", "postDebugTask", "request", "restart", "host", "port",
                 "rtdebugRank")  # fmt: skip


@dataclass(frozen=True)
class RankChoice:
    """``--ranks``: rank numbers (``0,2-3``, ``all``) or mesh coordinates (``dp=1,tp=*``), matched per rank as
    it appears (a mesh selector chooses a rank once that rank has published its mesh)."""

    text: str = "all"
    numbers: frozenset[int] | None = None  # None: every rank (or a mesh selector decides)
    terms: tuple[selector.Term, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> RankChoice:
        if text is None or text.strip().lower() == "all":
            return cls()
        if selector.is_mesh(text):
            return cls(text, None, tuple(selector.parse(text, "--ranks")))
        try:
            numbers = parse_rank_list(text, flag="--ranks")
        except HarnessError as exc:
            raise usage(exc.message) from None
        if not numbers:
            raise usage(f"--ranks {text}: selects no rank")
        return cls(text, numbers)

    def wants(self, entry: RankEntry) -> bool:
        if self.terms:
            return selector.matches(list(self.terms), selector.coords_of(entry))
        return self.numbers is None or entry["rank"] in self.numbers


def child_name(entry: RankEntry) -> str:
    """``rank 1``, or ``rank 1 (dp=0,tp=1)`` on a mesh."""
    coords = selector.coords_of(entry)
    where = ",".join(f"{d}={c}" for d, c in coords.items())
    return f"rank {entry['rank']}" + (f" ({where})" if where else "")


def rank_address(entry: RankEntry) -> tuple[str, int]:
    """Where a client here connects for this rank (a rank on another node: its node's address when it binds
    every interface; a loopback one there needs a tunnel, as ``rtdebug attach`` says)."""
    if entry.get("node_ip"):
        from rtdebug.views.store import connect_host  # the store view: loaded only for a multi-node job

        return connect_host(entry)[0], int(entry["port"])
    return str(entry["host"]), int(entry["port"])


def marker(entry: RankEntry) -> dict[str, int]:
    """What a child's configuration carries (``rtdebugRank``) so that, connecting back to the job endpoint
    (``rtdebug.dap.relay``), it names its rank; a client that connects to ``connect`` never uses it."""
    return {"rank": int(entry["rank"]), "pid": int(entry.get("pid") or 0)}


def child_configuration(entry: RankEntry, parent: dict[str, Any]) -> dict[str, Any]:
    """The ``startDebugging`` configuration for one rank: the parent's attach arguments (its ``type``,
    ``justMyCode``, path mappings...) less the ones that name the parent, plus the rank's name and address."""
    config = {k: v for k, v in parent.items() if k not in NOT_INHERITED and not k.startswith("__")}
    host, port = rank_address(entry)
    config.update(request="attach", name=child_name(entry), connect={"host": host, "port": port})
    config["rtdebugRank"] = marker(entry)
    return config


def key_of(entry: RankEntry) -> RankKey:
    return (int(entry["rank"]), int(entry.get("pid") or 0), float(entry.get("create_time") or 0.0), int(entry["port"]))


def attachable(entry: RankEntry, local: bool) -> bool:
    """Could a client attach to this rank now (what ``rtdebug attach`` waits for)?"""
    if local and not is_alive(entry["pid"], entry["create_time"]):
        return False
    return entry["state"] in ATTACHABLE_STATES or (entry["state"] == "failed" and local)


def live_session(views: Views, session_id: str) -> ListedSession | None:
    """The session now, or None once it is over (ended, stopped, or its processes gone)."""
    s = views.session(session_id)
    if s is None or s.get("state") not in LIVE_SESSION_STATES:
        return None
    if s.get("source", "local") == "local" and not judge(s, s.get("ranks", []), time.time()).active:
        return None
    return s


def new_ranks(session: ListedSession, choice: RankChoice, seen: set[RankKey]) -> list[RankEntry]:
    """The chosen ranks a client could attach to now that have no child yet, in rank order."""
    local = session.get("source", "local") == "local"
    out = []
    for entry in sorted(session.get("ranks", []), key=lambda e: e["rank"]):
        if entry.get("verified") is False or key_of(entry) in seen:
            continue
        if choice.wants(entry) and attachable(entry, local):
            out.append(entry)
    return out


def state_lines(session: ListedSession, choice: RankChoice, known: dict[int, str]) -> list[str]:
    """``rank 1: stopped at train.py:41 (breakpoint)`` for each chosen rank whose debug state (the entry's
    ``debug`` field, as ``rtdebug ps`` shows it) changed since ``known``, which is updated; a rank's first
    state is told unless it is ``running``."""
    lines = []
    for entry in sorted(session.get("ranks", []), key=lambda e: e["rank"]):
        if entry.get("verified") is False or not choice.wants(entry):
            continue
        now, before = debug_state(entry), known.get(entry["rank"])
        if now and now != before and (before is not None or now != "running"):
            lines.append(f"rank {entry['rank']}: {now}")
        if now:
            known[entry["rank"]] = now
    return lines
