"""``ps``, ``attach`` and ``stop``: the commands that act on running sessions, through ``harness.views``.

They never touch a backend directly: sessions and ranks come from ``Views``
(this machine's files, plus a job's c10d store or a Ray cluster when asked), so
a torchrun rank, a rank on another node and a Ray worker are handled alike.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from typing import Any

from harness import vscode
from harness.errors import HarnessError, usage
from harness.launcher import format_table
from harness.liveness import ended_sessions
from harness.procinfo import is_alive
from harness.registry import SCHEMA_VERSION, Registry
from harness.views import ViewOptions, Views

URI = "vscode://rtdebug.rtdebug-vscode/attach?session={sid}&rank={rank}"
Entry = dict[str, Any]


def _unreadable_lines(reg: Registry) -> list[str]:
    return [f"rtdebug: warning: unreadable registry entry {why}" for why in sorted(reg.unreadable.values())]


def ps(as_json: bool, show_all: bool = False, opts: ViewOptions | None = None) -> int:
    reg = Registry()
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


def _world_size(session: Entry) -> int:
    from harness.launcher import max_nodes_of

    for r in session["ranks"]:
        return int(r["world_size"])
    return max_nodes_of(session["nnodes"]) * int(session["nproc_per_node"])


def _rank_ready(views: Views, reg: Registry, sid: str, rank: int, timeout: float) -> Entry:
    """Wait until rank ``rank`` of session ``sid`` can be attached; its entry."""
    deadline = time.monotonic() + timeout
    while True:
        current = views.session(sid)
        if current is None:
            raise HarnessError(f"session {sid} has ended")
        entry = next((r for r in current["ranks"] if r["rank"] == rank), None)
        if entry is None and current.get("source", "local") == "local":
            why = reg.rank_unreadable(sid, rank)
            if why is not None:
                raise HarnessError(
                    f"rank {rank}'s registry entry is unreadable ({why}); "
                    f"`rtdebug stop --session {sid}` ends the session"
                )
        if entry is not None:
            local = current.get("source", "local") == "local"
            alive = not local or is_alive(entry["pid"], entry["create_time"])
            # a failed rank that is still alive is waiting for a post-mortem client
            if entry["state"] in ("ready", "attached") or (entry["state"] == "failed" and alive and local):
                return entry
            if entry["state"] in ("exited", "failed"):
                raise HarnessError(
                    f"rank {rank} of session {sid} has {entry['state']} (exit code {entry.get('exit_code')})"
                )
            if entry["state"] == "orphaned":
                raise HarnessError(
                    f"rank {rank} of session {sid} is orphaned (its launcher is gone); "
                    f"end it with `rtdebug stop --session {sid}`"
                )
        if current["state"] not in ("starting", "running"):
            raise HarnessError(f"session {sid} has ended")
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:g}s waiting for rank {rank} of session {sid}")
        time.sleep(0.1)


def attach(
    rank: int, session_id: str | None, timeout: float, as_json: bool, to_vscode: bool, opts: ViewOptions | None = None
) -> int:
    reg = Registry()
    views = Views.open(opts, reg)
    session = views.find_session(session_id)
    sid = session["session_id"]
    world = _world_size(session)
    if not 0 <= rank < world:
        raise usage(f"rank {rank} is out of range: session {sid} has world size {world}")
    entry = _rank_ready(views, reg, sid, rank, timeout)
    if entry.get("node_ip"):  # a rank on another node (store view): loopback there needs a tunnel
        from harness.store_view import connect_host

        note = connect_host(entry)[1]
        if note:
            print(f"rtdebug: warning: {note}", file=sys.stderr)
    config = vscode.attach_config(
        f"{vscode.PREFIX}attach rank {rank} ({sid})",
        entry["host"],
        entry["port"],
        entry.get("cwd", "${workspaceFolder}"),
    )
    if as_json:
        print(
            json.dumps(
                {
                    "session_id": sid,
                    "rank": rank,
                    "host": entry["host"],
                    "port": entry["port"],
                    "state": entry["state"],
                    "configuration": config,
                },
                indent=1,
            )
        )
    else:
        print(f"{entry['host']}:{entry['port']}")
        print(json.dumps(config, indent=2))
    if to_vscode:
        uri = URI.format(sid=sid, rank=rank)
        code = shutil.which("code")
        if code is None:
            print(f"rtdebug: `code` is not on PATH; open this URI in VS Code: {uri}", file=sys.stderr)
        else:
            subprocess.run([code, "--open-url", uri], check=False)
    return 0


def stop(session_id: str | None, every: bool, opts: ViewOptions | None = None) -> int:
    reg = Registry()
    views = Views.open(opts, reg)
    live = views.sessions()
    if every:
        targets = live
    elif session_id is not None:
        targets = [views.find_session(session_id)]
    elif len(live) == 1:
        targets = live
    elif not live:
        raise HarnessError("no live rtdebug session to stop")
    else:
        raise usage(f"{len(live)} live sessions; pick one with --session ID or use --all")
    for s in targets:
        print(views.view_of(s).stop(s))
    if every and not live:
        print("rtdebug: no live sessions")
    return 0
