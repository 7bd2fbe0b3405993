"""``rtdebug connect HOST``: a job running on other machines, debugged from this one through ssh.

Runs on the user's machine. The job is found as ``rtdebug ps`` finds it on ``HOST`` (run there over ssh);
every rank's debug port and the job's store are forwarded to free ports on 127.0.0.1 here (one ssh control
master per node, through ``--jump`` hosts), and a local session (mode ``connected``) points at them, so
``ps``, ``attach``, ``stacks`` and the VS Code extension work here as on a node (``--ray-address``: a Ray
Train run's workers, found in the cluster's KV through ``HOST``, each reached through its own node). It stays in the
foreground, following ranks that appear or end, until Ctrl-C, SIGTERM, ``rtdebug stop`` or the job's end;
then nothing is left running, bound or registered. The machinery: ``rtdebug.connect``.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading

from rtdebug.commands.options import Options, session_arg
from rtdebug.common.errors import HarnessError
from rtdebug.connect.session import DEFAULT_REFRESH_S, Connection, warn
from rtdebug.connect.session import Options as ConnectOptions
from rtdebug.connect.transport import SshTransport


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectCommandOptions(Options, ConnectOptions):
    """``rtdebug connect``'s options: the fields and their checks are the connection's
    (``rtdebug.connect.session.Options``), built as every command's are."""


OPTIONS = ConnectCommandOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "connect",
        help=summary,
        description="Forward every rank of a job on other machines to this one through ssh (the system's ssh: "
        "~/.ssh/config applies) and register it here, so ps, attach, stacks and VS Code work as on a node. "
        "Stays in the foreground; Ctrl-C closes every tunnel.",
    )
    p.add_argument("host", metavar="HOST", help="any machine of the job you can ssh to (an alias of ~/.ssh/config)")
    p.add_argument("--jump", metavar="J1[,J2]", help="jump hosts on the way to every node (ssh -J)")
    p.add_argument("--session", type=session_arg, help="the session on HOST (default: its newest verified one)")
    p.add_argument("--store", metavar="HOST:PORT", help="find the job through its rendezvous store, as HOST reaches it")
    p.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="a Ray cluster's GCS, as HOST reaches it: connect its newest rtdebug-armed Ray Train run's workers "
        "(--session names another run)",
    )
    p.add_argument(
        "--remote-rtdebug",
        metavar="CMD",
        default="rtdebug",
        help="how the nodes run rtdebug over ssh (default: rtdebug on their PATH), e.g. ~/venv/bin/rtdebug",
    )
    p.add_argument("--ssh-config", metavar="FILE", help="ssh client configuration file (ssh -F; default: ssh's own)")
    p.add_argument("--ssh-option", metavar="NAME=VALUE", action="append", help="an ssh -o option (repeatable)")
    p.add_argument(
        "--local-port-base",
        type=int,
        metavar="PORT",
        help="rank N gets local port PORT+N (default: any free port for each rank)",
    )
    p.add_argument(
        "--refresh",
        type=float,
        default=DEFAULT_REFRESH_S,
        metavar="S",
        help=f"seconds between looks at the job for ranks that appeared or ended (default {DEFAULT_REFRESH_S:g})",
    )


def run(opts: ConnectCommandOptions) -> int:
    stop = threading.Event()
    ended: list[str] = []
    phase = ["starting"]

    def on_signal(signum: int, _frame: object) -> None:
        ended.append(signal.Signals(signum).name)
        stop.set()
        if phase[0] == "starting" and len(ended) == 1:  # mid-start: give up now, as Ctrl-C does
            raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored one (nohup's SIGHUP) stays ignored
            signal.signal(sig, on_signal)
    transport = SshTransport(opts.jumps(), opts.ssh_config, opts.ssh_option)
    conn = Connection(transport, opts)
    try:
        conn.start()
        phase[0] = "connected"
        print(conn.summary(), flush=True)
        return _follow(conn, opts, stop, ended)
    except KeyboardInterrupt:
        phase[0] = "closing"
        what = f"from session {conn.sid}" if conn.sid else f"from {opts.host} before a session was chosen"
        print(f"rtdebug: disconnected {what}; every tunnel closed", file=sys.stderr, flush=True)
        return 0
    except OSError as exc:  # this machine's registry (or a socket of ours) cannot be used
        where = f" ({exc.filename})" if exc.filename else ""
        raise HarnessError(f"connect cannot go on here: {exc.strerror or exc}{where}") from None
    finally:
        phase[0] = "closing"
        conn.close()


def _follow(conn: Connection, opts: ConnectCommandOptions, stop: threading.Event, ended: list[str]) -> int:
    """Refresh until the job ends or a signal says stop; the line that says why."""
    why = ""
    while not stop.wait(opts.refresh):
        try:
            if not conn.refresh():
                why = f"the job's session {conn.sid} has ended on {opts.host}"
                break
        except HarnessError as exc:
            warn(exc.message)
    if ended:
        why = f"{ended[0]}"
    print(f"rtdebug: disconnected from session {conn.sid} ({why}); every tunnel closed", flush=True)
    return 0
