"""``rtdebug ps``: live sessions and their ranks, from every view (this machine's files, a job's store, a
Ray cluster), plus ``--all`` the ended ones still kept. Damaged entries are named, never fatal: a local
file in one warning line each, a remote entry that is not a valid record too (``skipped``). Remote
entries no job secret here verifies are listed with ``UNVERIFIED`` (``"verified": false`` in ``--json``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TypeVar

from rtdebug.commands.options import Options, view_options
from rtdebug.registry.entry import SCHEMA_VERSION
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import ended_sessions, prune
from rtdebug.registry.schema import SessionWithRanks
from rtdebug.registry.table import format_table, pg_timeout
from rtdebug.views.api import ViewOptions, Views
from rtdebug.views.remote import skipped_line


@dataclasses.dataclass(frozen=True, kw_only=True)
class PsOptions(Options):
    json: bool = False
    all: bool = False  # also the ended sessions still kept
    rank: str | None = None  # only these ranks: numbers, or mesh coordinates (rtdebug.common.selector)
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)


OPTIONS = PsOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "ps",
        help=summary,
        description="List live sessions (and orphaned ones: launcher gone, processes not).",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (the registry schema)")
    p.add_argument("--all", action="store_true", help="also list ended sessions still kept in the registry")
    p.add_argument("--rank", metavar="RANKS", help="only these ranks: 0,2-3, or mesh coordinates: dp=0,tp=*")
    view_options(p)


S = TypeVar("S", bound=SessionWithRanks)  # a listed (live) or an ended session


def _only(sessions: list[S], spec: str | None) -> list[S]:
    """Each session with only the ranks ``--rank`` chooses (mesh coordinates: among its verified entries)."""
    if spec is None:
        return sessions
    from rtdebug.common import selector
    from rtdebug.common.errors import HarnessError, usage
    from rtdebug.common.ports import parse_rank_list

    mesh = selector.is_mesh(spec)
    try:
        numbers = None if mesh else parse_rank_list(spec)
    except HarnessError as exc:
        raise usage(exc.message.replace("--wait", "--rank")) from None
    if mesh:
        selector.parse(spec)  # a malformed selector is one line, whatever the sessions hold
    out: list[S] = []
    for s in sessions:
        each: SessionWithRanks = s
        known = [r for r in each.get("ranks", []) if r.get("verified") is not False]
        chosen = numbers
        if mesh:
            chosen = selector.resolve(spec, known) if selector.dims_of(known) else frozenset()
        only = s.copy()
        only["ranks"] = [r for r in each.get("ranks", []) if chosen is None or r["rank"] in chosen]
        out.append(only)
    return out


def _unreadable_lines(reg: Registry) -> list[str]:
    return [f"rtdebug: warning: unreadable registry entry {why}" for why in sorted(reg.unreadable.values())]


def _trust_note(s: SessionWithRanks) -> str | None:
    """How much of a remote session no secret here verifies (None: all of it is verified)."""
    bad = [str(r["rank"]) for r in s.get("ranks", []) if r.get("verified") is False]
    if s.get("verified") is False:
        return "  UNVERIFIED: no job secret here matches its entries (never chosen by default; RTDEBUG_JOB_SECRET)"
    if bad:
        return f"  unverified rank entries: {', '.join(bad)} (no job secret here matches them; RTDEBUG_JOB_SECRET)"
    return None


def run(opts: PsOptions) -> int:
    reg = Registry()
    prune(reg)  # the one step that writes: entries now say what their processes are
    views = Views.open(opts.views, reg)
    live = _only(views.sessions(), opts.rank)
    ended = _only(ended_sessions(reg), opts.rank) if opts.all else []
    skipped = views.skipped()
    unreadable = _unreadable_lines(reg) + [skipped_line(label, key, why) for label, key, why in skipped]
    if opts.json:
        print(
            json.dumps(
                {
                    "schema_version": SCHEMA_VERSION,
                    "registry": str(reg.root),
                    "sessions": live,
                    "ended": ended,
                    "unreadable": sorted(str(p) for p in reg.unreadable),
                    "skipped": [{"source": label, "key": key, "error": why} for label, key, why in skipped],
                },
                indent=1,
            )
        )
        for line in unreadable:
            print(line, file=sys.stderr)
        return 0
    for line in unreadable:
        print(line, file=sys.stderr)
    if not live and not ended:
        print("no live rtdebug sessions")
        return 0
    shown: list[tuple[SessionWithRanks, str]] = [(s, s.get("source", "local")) for s in live]
    shown += [(s, "local") for s in ended]  # an ended session is one of this machine's files
    for s, source in shown:
        ports = f"ports {s['ports'][0]}-{s['ports'][-1]}" if s.get("ports") else "no local ports"
        where = "" if source == "local" else f"  via {source}"
        where += "  [unverified]" if s.get("verified") is False else ""
        where += f"  {pg_timeout(s)}" if pg_timeout(s) else ""
        print(
            f"session {s['session_id']}  {s['mode']}  {s['script']}  state={s['state']}  "
            f"launcher pid {s['launcher_pid']}  {ports}{where}"
        )
        if isinstance(s.get("replay"), dict):  # rtdebug replay: one captured rank, alone
            rp = s["replay"]
            print(f"  replay of rank {rp.get('rank')} (of {rp.get('world_size')}) from {rp.get('capsule')}")
        if s.get("error") and s["state"] in ("orphaned", "failed"):
            print(f"  {s['error']}")
        note = _trust_note(s)
        if note:
            print(note)
        if s["ranks"]:
            print("  " + format_table(s["ranks"], s["session_id"]).replace("\n", "\n  "))
    return 0
