"""``rtdebug ps``: live sessions and their ranks, from every view (this machine's files, a job's store, a
Ray cluster), plus ``--all`` the ended ones still kept. Damaged entries are named, never fatal."""

from __future__ import annotations

import json
import sys

from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import ended_sessions, prune
from rtdebug.registry.record import SCHEMA_VERSION
from rtdebug.registry.table import format_table
from rtdebug.views.api import ViewOptions, Views


def _unreadable_lines(reg: Registry) -> list[str]:
    return [f"rtdebug: warning: unreadable registry entry {why}" for why in sorted(reg.unreadable.values())]


def command(as_json: bool, show_all: bool = False, opts: ViewOptions | None = None) -> int:
    reg = Registry()
    prune(reg)  # the one step that writes: entries now say what their processes are
    views = Views.open(opts, reg)
    live = views.sessions()
    ended = ended_sessions(reg) if show_all else []
    unreadable = _unreadable_lines(reg)
    if as_json:
        print(
            json.dumps(
                {
                    "schema_version": SCHEMA_VERSION,
                    "registry": str(reg.root),
                    "sessions": live,
                    "ended": ended,
                    "unreadable": sorted(str(p) for p in reg.unreadable),
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
    for s in live + ended:
        ports = f"ports {s['ports'][0]}-{s['ports'][-1]}" if s.get("ports") else "no local ports"
        where = "" if s.get("source", "local") == "local" else f"  via {s['source']}"
        print(
            f"session {s['session_id']}  {s['mode']}  {s['script']}  state={s['state']}  "
            f"launcher pid {s['launcher_pid']}  {ports}{where}"
        )
        if s.get("error") and s["state"] in ("orphaned", "failed"):
            print(f"  {s['error']}")
        if s["ranks"]:
            print("  " + format_table(s["ranks"], s["session_id"]).replace("\n", "\n  "))
    return 0
