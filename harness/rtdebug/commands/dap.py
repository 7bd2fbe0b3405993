"""``rtdebug dap``: one DAP endpoint for a whole running job (started, adopted or connected here).

Any DAP client that handles ``startDebugging`` (nvim-dap, Emacs dape, Helix, VS Code) attaches to it once and
gets one child session per rank (``rtdebug.dap``). It serves until the session is over, the client ends the
job (``terminate``), or Ctrl-C / SIGTERM (the job runs on). ``rtdebug torchrun --dap-port P`` starts the same
server beside the launcher.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys

from rtdebug.commands.options import Options, session_arg, view_options
from rtdebug.common.errors import usage
from rtdebug.dap.children import RankChoice
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.views.api import ViewOptions, Views


@dataclasses.dataclass(frozen=True, kw_only=True)
class DapOptions(Options):
    session: str | None = None
    port: int = 0
    ranks: str | None = None
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise usage(f"--port {self.port}: a TCP port, 1-65535 (0: any free port)")
        RankChoice.parse(self.ranks)  # a malformed selector is a usage error now, not when a client attaches


OPTIONS = DapOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "dap",
        help=summary,
        description="Serve one DAP endpoint for a running job on 127.0.0.1: a client attaches once and gets one "
        "child session per rank (DAP startDebugging). Runs until the job ends, a client terminates it, or Ctrl-C.",
    )
    p.add_argument("--session", type=session_arg, help="session id (default: the newest live session)")
    p.add_argument("--port", type=int, default=0, metavar="P", help="port to listen on (default 0: any free port)")
    p.add_argument(
        "--ranks",
        metavar="SEL",
        help="only these ranks become child sessions: 0,2-3, all, or mesh coordinates such as dp=0,tp=* (default: all)",
    )
    view_options(p)


def run(opts: DapOptions) -> int:
    from rtdebug.dap.server import JobEndpoint  # the socket server: loaded only when it serves

    reg = Registry()
    prune(reg)
    views = Views.open(opts.views, reg)
    session = views.find_session(opts.session)
    sid = session["session_id"]
    # every rank's entry a file in the session's directory here (not a multi-node job's store, not Ray's KV)
    files_only = session.get("mode") in ("torchrun", "adopted", "connected") and not session.get("store")
    watch = reg.session_dir(sid) if files_only and session.get("source", "local") == "local" else None
    server = JobEndpoint(views, sid, RankChoice.parse(opts.ranks), port=opts.port, watch=watch)
    host, port = server.address
    signal.signal(signal.SIGTERM, lambda *_: server.done.set())
    print(
        f"rtdebug: DAP endpoint for session {sid} on {host}:{port}: attach a DAP client there "
        "(one child session per rank); Ctrl-C closes it, the job runs on",
        flush=True,
    )
    try:
        server.serve()
    except KeyboardInterrupt:
        server.close()
    print(f"rtdebug: DAP endpoint for session {sid} closed", file=sys.stderr, flush=True)
    return 0
