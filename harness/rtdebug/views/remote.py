"""What every remote view (a job's c10d store, a Ray cluster's KV) does with an entry before using it.

Anyone who reaches those stores can write them, so an entry is a hint: it must pass the same schema check
as a local file (``rtdebug.registry.entry.problem``), else it is skipped and named in one line; and it is
``verified`` only when its MAC matches a secret this reader knows (``rtdebug.registry.signing``): the
user's, or one of this machine's live sessions'. Unverified entries are listed, marked, and never chosen
by default; no pid in any remote entry is ever signalled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, overload

from rtdebug.common.errors import HarnessError
from rtdebug.registry import signing
from rtdebug.registry.entry import LIVE_SESSION_STATES, checked, problem
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import ListedSession, RankEntry, SessionEntry

# Optional fields the views compare, hash or format: of these types when present, or the entry is junk.
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(
        ("node_ip", "hostname", "node_id", "ray_job_id", "driver_hostname", "parent_session", "ray_address"), str
    ),
    **dict.fromkeys(("machine", "driver_machine"), str),
    **dict.fromkeys(("cwd", "store", "error", "mode", "nnodes"), str),
    "tick": int,
    **dict.fromkeys(("heartbeat", "updated_at"), (int, float)),
}


def _optional_problem(value: Mapping[str, Any]) -> str | None:
    for name, typ in OPTIONAL.items():
        v = value.get(name)
        if v is not None and (not isinstance(v, typ) or isinstance(v, bool)):
            return f"field {name!r} of the wrong type"
    return None


@overload
def check(
    key: str, value: Any, kind: Literal["session"], known: list[str]
) -> tuple[SessionEntry | None, str | None]: ...
@overload
def check(key: str, value: Any, kind: Literal["rank"], known: list[str]) -> tuple[RankEntry | None, str | None]: ...
def check(
    key: str, value: Any, kind: Literal["session", "rank"], known: list[str]
) -> tuple[SessionEntry | RankEntry | None, str | None]:
    """(the entry without its MAC, with ``verified``; None) or (None, why it is not an entry of ``kind``)."""
    why = problem(value, kind) or _optional_problem(value)
    if why is not None:
        return None, why
    entry = checked({k: v for k, v in value.items() if k != signing.MAC}, kind)  # the MAC is no schema field
    entry["verified"] = signing.verify(key, value, known)
    return entry, None


def local_trust(registry: Registry | None = None) -> tuple[list[str], frozenset[str]]:
    """What this machine can verify with (the user's secret, its live sessions' own) and the ids of its
    live sessions: a remote entry may claim one of those ids only with that session's signature."""
    reg = registry or Registry()
    dirs, ids = [], set()
    try:
        for s in reg.sessions():
            if s.get("state") in LIVE_SESSION_STATES or s.get("state") == "orphaned":
                dirs.append(reg.session_dir(s["session_id"]))
                ids.add(s["session_id"])
    except OSError:
        pass
    return signing.known_secrets(dirs), frozenset(ids)


def claims_local(entry: SessionEntry | RankEntry, local_ids: frozenset[str]) -> str | None:
    """Why an unverified entry may not be used: it claims a session of this machine; else None."""
    if entry["session_id"] in local_ids and not entry["verified"]:
        return f"claims this machine's session {entry['session_id']} without its signature"
    return None


def skipped_line(label: str, key: str, why: str) -> str:
    return f"rtdebug: warning: skipped {label} entry {key[:120]!r}: {why}"


class RemoteView(Protocol):
    """One store or cluster (``StoreView``, ``RayView``): a ``View`` that names the entries it skipped."""

    label: str
    skipped: dict[str, str]

    def sessions(self) -> list[ListedSession]: ...

    def session(self, session_id: str) -> ListedSession | None: ...

    def stop(self, session: ListedSession) -> str: ...


class MultiView:
    """Several remote views of one kind (the clusters or stores this machine's live sessions recorded), as
    one view. A view that fails to answer (its job or cluster ended) is passed over; a session is stopped
    through the view that listed it, never through an address the entry names."""

    label = ""
    gone = "session"  # what the user calls an entry that is no longer listed

    def __init__(self, views: Sequence[RemoteView]) -> None:
        self.views = views

    def sessions(self) -> list[ListedSession]:
        out: list[ListedSession] = []
        for v in self.views:
            try:
                out += [{**s, "source": self.label} for s in v.sessions()]
            except HarnessError:
                continue  # an auto-found store or cluster that ended with its job
        return out

    def session(self, session_id: str) -> ListedSession | None:
        for v in self.views:
            try:
                s = v.session(session_id)
            except HarnessError:
                continue
            if s is not None:
                return {**s, "source": self.label}
        return None

    @property
    def skipped(self) -> dict[str, str]:
        return {k: why for v in self.views for k, why in v.skipped.items()}

    def stop(self, session: ListedSession) -> str:
        for v in self.views:
            if v.session(session["session_id"]) is not None:
                return v.stop(session)
        raise HarnessError(f"{self.gone} {session['session_id']} has ended")
