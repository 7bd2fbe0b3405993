"""Which sessions and ranks exist, where, in what state: one interface, several backends.

The commands (``ps``, ``attach``, ``stop``, ``vscode``, ``stacks``) and, through
``ps --json``, the VS Code extension ask a ``View``. The answer comes from this
machine's registry files (``LocalView``, always on), from a multi-node job's own
c10d store (``rtdebug.views.store``) or from a Ray cluster's GCS
(``rtdebug.views.ray``). No server of ours: the engines users already run are the
source of truth. A backend module is imported only when its option is given, so
``ps`` on a laptop never imports torch or ray.

Entries keep the registry schema (``rtdebug/registry/registry.schema.json``);
every session returned carries ``ranks`` (its rank entries), ``source`` (the
label of the view that found it) and ``verified``: true for this machine's own
files and for remote entries signed with a job secret this reader knows
(``rtdebug.views.remote``). An unverified session is listed but never the
default choice; it is used only when named with ``--session``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from rtdebug.common.errors import HarnessError
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import ListedSession, NodeInfo
from rtdebug.views.local import LocalView


class View(Protocol):
    label: str

    def sessions(self) -> list[ListedSession]:
        """Live sessions (stale entries pruned), each with ``ranks`` and ``source``."""
        ...

    def session(self, session_id: str) -> ListedSession | None:
        """A fresh copy of one session (``attach`` polls it), or None if this view has no such session."""
        ...

    def stop(self, session: ListedSession) -> str:
        """End the session; return a one-line summary. Raises HarnessError when it cannot."""
        ...


@dataclass
class ViewOptions:
    """Where to look besides this machine's files (flags, else environment)."""

    ray_address: str | None = None
    store: str | None = None

    @classmethod
    def from_args(cls, args: Any = None) -> ViewOptions:
        ray = getattr(args, "ray_address", None) or os.environ.get("RAY_ADDRESS") or None
        store = getattr(args, "store", None) or os.environ.get("RTDEBUG_STORE") or None
        return cls(ray_address=ray, store=store)


# backend name -> module with ``open_view(opts: ViewOptions) -> View | None`` (None = not configured)
BACKENDS: dict[str, str] = {"store": "rtdebug.views.store", "ray": "rtdebug.views.ray"}


def _wanted(opts: ViewOptions, name: str) -> bool:
    """Every backend is asked; each one's ``open_view`` is cheap when it has nothing to show.

    Without --store / --ray-address they open only what live local sessions record (a multi-node job's
    store, the Ray cluster a ``rtdebug run`` used), so ``ps`` imports torch or ray only when there is one.
    """
    return True


class JobFacts(TypedDict, total=False):
    """A multi-node job's facts that a session entry may lack where the job's store has them."""

    nodes: list[NodeInfo]
    store: str
    rdzv_id: str | None


def _merge(first: ListedSession, other: ListedSession) -> ListedSession:
    """One session seen by two views (a multi-node job: this node's files and the job's store):
    the first view's entry, plus the ranks and job facts only the other one has."""
    have = {r["rank"] for r in first.get("ranks", [])}
    extra = [r for r in other.get("ranks", []) if r["rank"] not in have]
    facts = JobFacts()  # what only the other view knows of the job
    if "nodes" in other and "nodes" not in first:
        facts["nodes"] = other["nodes"]
    if "store" in other and "store" not in first:
        facts["store"] = other["store"]
    if "rdzv_id" in other and "rdzv_id" not in first:
        facts["rdzv_id"] = other["rdzv_id"]
    if not extra and not facts:
        return first
    return {**first, **facts, "ranks": sorted([*first.get("ranks", []), *extra], key=lambda r: r["rank"])}


class Views:
    """Every view the options name, local first; sessions are merged by id (first view wins)."""

    def __init__(self, views: list[View]) -> None:
        self.views = views

    @classmethod
    def open(cls, opts: ViewOptions | None = None, registry: Registry | None = None) -> Views:
        opts = opts or ViewOptions()
        views: list[View] = [LocalView(registry)]
        for name, module in BACKENDS.items():
            if not _wanted(opts, name):
                continue
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                raise HarnessError(f"the {name} view is not available: {exc}") from None
            view = mod.open_view(opts)
            if view is not None:
                views.append(view)
        return cls(views)

    def sessions(self) -> list[ListedSession]:
        seen: dict[str, ListedSession] = {}
        for view in self.views:
            for s in view.sessions():
                sid = s["session_id"]
                seen[sid] = _merge(seen[sid], s) if sid in seen else s
        return sorted(seen.values(), key=lambda s: s.get("started_at", 0))

    def session(self, session_id: str) -> ListedSession | None:
        found: ListedSession | None = None
        for view in self.views:
            s = view.session(session_id)
            if s is not None:
                found = s if found is None else _merge(found, s)
        return found

    def skipped(self) -> list[tuple[str, str, str]]:
        """(view label, key, why) of every remote entry a view skipped as not a valid record."""
        return [(v.label, k, why) for v in self.views for k, why in sorted(getattr(v, "skipped", {}).items())]

    def view_of(self, session: ListedSession) -> View:
        for view in self.views:
            if view.label == session.get("source"):
                return view
        return self.views[0]

    def find_session(self, session_id: str | None) -> ListedSession:
        """The named live session, or the newest verified one; a one-line error if there is none."""
        live = self.sessions()
        if session_id is not None:
            for s in live:
                if s["session_id"] == session_id:
                    return s
            for view in self.views[1:]:  # a multi-node job answers to any of its nodes' session ids
                found = view.session(session_id)
                if found is not None and found.get("state") in ("starting", "running"):
                    return found
            raise HarnessError(f"no live session {session_id!r}; see `rtdebug ps`")
        trusted = [s for s in live if s.get("verified") is not False]
        if not trusted and live:
            raise HarnessError(
                f"no verified live session; {len(live)} unverified remote session(s) "
                f"({', '.join(s['session_id'] for s in live[:3])}): name one with --session to use it anyway"
            )
        if not trusted:
            raise HarnessError("no live rtdebug session; start one with `rtdebug torchrun` or `rtdebug run`")
        return max(trusted, key=lambda s: s.get("started_at", 0))
