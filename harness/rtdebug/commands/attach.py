"""``rtdebug attach --rank N``: wait until rank N can be attached, then print what a client needs.

A rank entry no job secret here verifies (a remote store or Ray KV entry anyone on that network could
have written) is never handed out by default: only when the user names its session with ``--session``,
and then with its host shown first. A host that is not this machine is always named on stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from typing import Any

from rtdebug.commands import vsconfigs
from rtdebug.common.addresses import is_own
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.record import ATTACHABLE_STATES
from rtdebug.registry.table import world_size
from rtdebug.views.api import ViewOptions, Views

URI = "vscode://rtdebug.rtdebug-vscode/attach?session={sid}&rank={rank}"
Entry = dict[str, Any]


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
            if entry["state"] in ATTACHABLE_STATES or (entry["state"] == "failed" and alive and local):
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


def _check_trust(entry: Entry, session: Entry, rank: int, explicit: bool) -> bool:
    """Refuse an unverified rank entry unless its session was named; say where a remote rank is.
    Returns whether the rank's host is this machine."""
    sid, where = session["session_id"], f"{entry['host']}:{entry['port']}"
    local = is_own(str(entry["host"]))
    if entry.get("verified") is False:
        source = session.get("source", "a remote view")
        if not explicit:
            raise HarnessError(  # its host is not even shown: it may be anybody's
                f"rank {rank} of session {sid} is an unverified entry (via {source}): not used by default. "
                f"Set the job's RTDEBUG_JOB_SECRET here to verify it, or name the session (--session {sid}) "
                f"to see where it points and connect anyway"
            )
        print(
            f"rtdebug: warning: rank {rank}'s entry is unverified (via {source}; no job secret here matches it): "
            f"it points at {where}",
            file=sys.stderr,
        )
    elif not local:
        print(f"rtdebug: rank {rank} of session {sid} is on another machine: {where}", file=sys.stderr)
    return local


def command(
    rank: int, session_id: str | None, timeout: float, as_json: bool, to_vscode: bool, opts: ViewOptions | None = None
) -> int:
    reg = Registry()
    prune(reg)
    views = Views.open(opts, reg)
    session = views.find_session(session_id)
    sid = session["session_id"]
    world = world_size(session)
    if not 0 <= rank < world:
        raise usage(f"rank {rank} is out of range: session {sid} has world size {world}")
    entry = _rank_ready(views, reg, sid, rank, timeout)
    local = _check_trust(entry, session, rank, explicit=session_id is not None)
    if entry.get("node_ip"):  # a rank on another node (store view): loopback there needs a tunnel
        from rtdebug.views.store import connect_host

        note = connect_host(entry)[1]
        if note:
            print(f"rtdebug: warning: {note}", file=sys.stderr)
    config = vsconfigs.attach_config(
        f"{vsconfigs.PREFIX}attach rank {rank} ({sid})",
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
                    "verified": entry.get("verified") is not False,
                    "local": local,
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
