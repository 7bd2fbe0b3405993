"""``rtdebug stop``: end one session (or ``--all``) through the view that found it.

``--all`` stops this machine's sessions first, then the verified remote ones, each on its own: a
session that fails (or takes its whole timeout) is named in one line and the next one is still
stopped. Unverified remote sessions are never stopped by default (named with ``--session`` only).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from rtdebug.commands.options import Options, session_arg, view_options
from rtdebug.common.errors import HarnessError, usage
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.schema import ListedSession
from rtdebug.views.api import ViewOptions, Views
from rtdebug.views.remote import skipped_line


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopOptions(Options):
    session: str | None = None
    all: bool = False  # every live or orphaned session (argparse keeps it apart from --session)
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)


OPTIONS = StopOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "stop",
        help=summary,
        description="Stop a session: launcher, torchrun, ranks; then check its ports are free.",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--session", type=session_arg, help="session id (default: the only live session)")
    g.add_argument("--all", action="store_true", help="stop every live or orphaned session")
    view_options(p)


def _pick(views: Views, live: list[ListedSession], session_id: str | None) -> list[ListedSession]:
    if session_id is not None:
        return [views.find_session(session_id)]
    trusted = [s for s in live if s.get("verified") is not False]
    if len(trusted) == 1:
        return trusted
    if not live:
        raise HarnessError("no live rtdebug session to stop")
    if not trusted:
        raise HarnessError(f"{len(live)} unverified remote session(s) only; name one with --session ID to stop it")
    raise usage(f"{len(trusted)} live sessions; pick one with --session ID or use --all")


def _stop_each(views: Views, live: list[ListedSession]) -> int:
    failed = 0
    for s in sorted(live, key=lambda s: s.get("source", "local") != "local"):
        sid = s["session_id"]
        if s.get("verified") is False:
            print(
                f"rtdebug: skipped unverified session {sid} (via {s.get('source')}); "
                f"`rtdebug stop --session {sid}` stops it",
                file=sys.stderr,
            )
            continue
        try:
            print(views.view_of(s).stop(s), flush=True)
        except HarnessError as exc:
            print(f"rtdebug: error: {exc.message}", file=sys.stderr, flush=True)
            failed += 1
        except Exception as exc:  # one session's surprise must not leave the others running
            print(f"rtdebug: error: stopping session {sid} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed += 1
    return failed


def run(opts: StopOptions) -> int:
    reg = Registry()
    prune(reg)
    views = Views.open(opts.views, reg)
    live = views.sessions()
    for label, key, why in views.skipped():
        print(skipped_line(label, key, why), file=sys.stderr)
    if opts.all:
        if not live:
            print("rtdebug: no live sessions")
        return 1 if _stop_each(views, live) else 0
    for s in _pick(views, live, opts.session):
        print(views.view_of(s).stop(s))
    return 0
