"""``rtdebug attach --rank N`` (or ``--rank tp=1``: mesh coordinates, every rank they choose): wait until the
rank can be attached, then print what a client needs.

A rank entry no job secret here verifies (a remote store or Ray KV entry anyone on that network could
have written) is never handed out by default: only when the user names its session with ``--session``,
and then with its host shown first. A host that is not this machine is always named on stderr."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import time
from typing import Any

from rtdebug.commands import editorconfigs, vsconfigs
from rtdebug.commands.options import Options, session_arg, view_options
from rtdebug.common import selector
from rtdebug.common.addresses import is_own
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.entry import ATTACHABLE_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.schema import ListedSession, RankEntry
from rtdebug.registry.table import world_size
from rtdebug.views.api import ViewOptions, Views

URI = "vscode://rtdebug.rtdebug-vscode/attach?session={sid}&rank={rank}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttachOptions(Options):
    """``rank``: a rank number, or a mesh selector (``tp=1``): then every rank it chooses, one after another.
    Whether a number is in range, or a selector chooses any rank, only the session can say (``run``)."""

    rank: str
    session: str | None = None
    timeout: float = 60.0
    json: bool = False
    format: str | None = None  # another client's form (editorconfigs); --json stays VS Code's
    vscode: bool = False
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)

    def __post_init__(self) -> None:
        if self.json and self.format:
            raise usage(f"--json prints VS Code's configuration and --format {self.format} another client's: pick one")
        if not selector.is_mesh(self.rank):
            try:
                int(self.rank)
            except ValueError:
                raise usage(
                    f"--rank {self.rank!r}: a rank number or mesh coordinates such as tp=1 or dp=0,tp=*"
                ) from None


OPTIONS = AttachOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "attach",
        help=summary,
        description="Wait until a rank is ready, then print host:port and a debugpy attach config.",
    )
    p.add_argument(
        "--rank", required=True, metavar="N|SEL", help="a rank, or mesh coordinates: tp=1, dp=0,tp=*, pp=1:3, dp=(0,2)"
    )
    p.add_argument("--session", type=session_arg, help="session id (default: the newest live session)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait (default 60)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--format",
        choices=editorconfigs.FORMATS,
        help="print what that DAP client takes to attach (see docs/other-editors.md) instead of VS Code's config",
    )
    p.add_argument("--vscode", action="store_true", help="hand off to VS Code (rtdebug extension) via a vscode:// URI")
    view_options(p)


def _rank_ready(views: Views, reg: Registry, sid: str, rank: int, timeout: float) -> RankEntry:
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


def _check_trust(entry: RankEntry, session: ListedSession, rank: int, explicit: bool) -> bool:
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


def _chosen(views: Views, session: ListedSession, spec: str, timeout: float) -> list[int]:
    """The ranks a mesh selector chooses, once the session's verified entries name their meshes (a rank
    publishes a mesh when the job makes it: wait for that as for readiness)."""
    sid = session["session_id"]
    deadline = time.monotonic() + timeout
    while True:
        current = views.session(sid) or session
        known = [e for e in current.get("ranks", []) if e.get("verified") is not False]
        if selector.dims_of(known) or time.monotonic() > deadline:
            ranks = sorted(selector.resolve(spec, known))
            if not ranks:
                raise usage(f"--rank {spec} selects no rank")
            return ranks
        time.sleep(0.1)


def run(opts: AttachOptions) -> int:
    reg = Registry()
    prune(reg)
    views = Views.open(opts.views, reg)
    session = views.find_session(opts.session)
    sid = session["session_id"]
    world = world_size(session)
    ranks = _chosen(views, session, opts.rank, opts.timeout) if selector.is_mesh(opts.rank) else [int(opts.rank)]
    for r in ranks:
        if not 0 <= r < world:
            raise usage(f"rank {r} is out of range: session {sid} has world size {world}")
    answers = [_attach_one(views, reg, session, r, opts.timeout, opts.session is not None) for r in ranks]
    if opts.json:
        print(json.dumps(answers[0] if len(answers) == 1 else answers, indent=1))
    elif opts.format:
        for a in answers:
            print(editorconfigs.render(opts.format, a["rank"], sid, a["host"], a["port"]))
    else:
        for a in answers:
            print(f"{a['host']}:{a['port']}")
            print(json.dumps(a["configuration"], indent=2))
    if opts.vscode:
        for r in ranks:
            uri = URI.format(sid=sid, rank=r)
            code = shutil.which("code")
            if code is None:
                print(f"rtdebug: `code` is not on PATH; open this URI in VS Code: {uri}", file=sys.stderr)
            else:
                subprocess.run([code, "--open-url", uri], check=False)
    return 0


def _attach_one(
    views: Views, reg: Registry, session: ListedSession, rank: int, timeout: float, explicit: bool
) -> dict[str, Any]:  # ``attach --json``'s answer
    sid = session["session_id"]
    entry = _rank_ready(views, reg, sid, rank, timeout)
    local = _check_trust(entry, session, rank, explicit=explicit)
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
    out: dict[str, Any] = {
        "session_id": sid,
        "rank": rank,
        "host": entry["host"],
        "port": entry["port"],
        "state": entry["state"],
        "verified": entry.get("verified") is not False,
        "local": local,
        "configuration": config,
    }
    coords = selector.label(entry)
    if coords:
        out["coords"] = coords
    return out
