"""``rtdebug`` command line: one ``_add_<cmd>`` / ``_cmd_<cmd>`` pair per subcommand.

``main(argv) -> int`` never lets a user mistake become a traceback: a
``HarnessError`` becomes ``rtdebug: <message>`` and its exit code (2 = usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

from rtdebug.commands import attach, ps, stop
from rtdebug.commands.options import OUR_FLAGS, debug_options, split_our_options, torchrun_parser
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import DEFAULT_PORT_BASE
from rtdebug.registry.record import valid_session_id
from rtdebug.views.api import ViewOptions


def _session_id(text: str) -> str:
    """``--session``: one pattern for every session id (never a path)."""
    if not valid_session_id(text):
        raise argparse.ArgumentTypeError(f"invalid session id {text[:80]!r}; see `rtdebug ps`")
    return text


def _add_run(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a single-process (local mode) script under the debugger",
        description="Run a script (or -m module) in this process with a debug endpoint.",
    )
    debug_options(p, "--port", "--host", "--allow")
    p.add_argument("--wait", action="store_true", help="block before the script until a client attaches")
    p.add_argument(
        "--debug-port-base",
        type=int,
        default=None,
        metavar="P",
        help="Ray Train workers (num_workers > 0): world rank N listens on P + N (default: --port + 1)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster for the script's ray.init() (sets RAY_ADDRESS; default: $RAY_ADDRESS)",
    )
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module")
    p.add_argument("target", help="script path (or module name with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def _cmd_run(args) -> int:
    from rtdebug.launcher import start  # the launcher, loaded only by the commands that start a job

    return start.run_single(args)


def _add_torchrun(sub) -> None:
    sub.add_parser(
        "torchrun", add_help=False, help="run a job under real torchrun, one debug port per rank", prefix_chars="\0"
    ).add_argument("rest", nargs=argparse.REMAINDER)


def _cmd_torchrun(args) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # torch is an extra: `rtdebug run` needs none
        raise HarnessError("rtdebug torchrun needs PyTorch (pip install torch); `rtdebug run` works without it")
    tokens = args.rest
    if not tokens or tokens[0] in ("-h", "--help"):
        torchrun_parser().print_help()
        return 0 if tokens else 2
    ours, rest = split_our_options(tokens)
    parser = torchrun_parser()
    parsed = parser.parse_args(ours + rest)
    misplaced = [t for t in rest[: len(rest) - len(parsed.training_script_args) - 1] if t.split("=", 1)[0] in OUR_FLAGS]
    if misplaced:
        parser.error(f"rtdebug option {misplaced[0]} must come before torchrun options")
    from rtdebug.launcher import start

    return start.run_torchrun(parsed, rest)


def _view_options(p: argparse.ArgumentParser) -> None:
    """Where to find sessions besides this machine's registry (see rtdebug.views.api)."""
    g = p.add_argument_group("cluster views")
    g.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="also list ranks of Ray Train workers on this Ray cluster (default: $RAY_ADDRESS)",
    )
    g.add_argument(
        "--store",
        metavar="HOST:PORT",
        help="also list every rank of a multi-node torchrun job through its rendezvous store (default: $RTDEBUG_STORE)",
    )


def _add_ps(sub) -> None:
    p = sub.add_parser(
        "ps",
        help="list live sessions and their ranks",
        description="List live sessions (and orphaned ones: launcher gone, processes not).",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (the registry schema)")
    p.add_argument("--all", action="store_true", help="also list ended sessions still kept in the registry")
    _view_options(p)


def _cmd_ps(args) -> int:
    return ps.command(args.json, args.all, ViewOptions.from_args(args))


def _add_attach(sub) -> None:
    p = sub.add_parser(
        "attach",
        help="wait for rank N and print what a client needs to attach",
        description="Wait until a rank is ready, then print host:port and a debugpy attach config.",
    )
    p.add_argument(
        "--rank", required=True, metavar="N|SEL", help="a rank, or mesh coordinates: tp=1, dp=0,tp=*, pp=1:3, dp=(0,2)"
    )
    p.add_argument("--session", type=_session_id, help="session id (default: the newest live session)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds to wait (default 60)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--vscode", action="store_true", help="hand off to VS Code (rtdebug extension) via a vscode:// URI")
    _view_options(p)


def _cmd_attach(args) -> int:
    return attach.command(args.rank, args.session, args.timeout, args.json, args.vscode, ViewOptions.from_args(args))


def _add_stop(sub) -> None:
    p = sub.add_parser(
        "stop",
        help="stop a session's whole process tree",
        description="Stop a session: launcher, torchrun, ranks; then check its ports are free.",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--session", type=_session_id, help="session id (default: the only live session)")
    g.add_argument("--all", action="store_true", help="stop every live or orphaned session")
    _view_options(p)


def _cmd_stop(args) -> int:
    return stop.command(args.session, args.all, ViewOptions.from_args(args))


def _add_vscode(sub) -> None:
    p = sub.add_parser(
        "vscode",
        help="print VS Code launch/task configurations as JSON",
        description="Print the configurations, compounds, tasks and inputs for one script.",
    )
    p.add_argument("--script", required=True)
    p.add_argument("--mode", choices=["run", "torchrun"], default="torchrun")
    p.add_argument("--nproc-per-node", type=int, default=2)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--hosts", help="comma-separated host of each node (default 127.0.0.1)")
    p.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE)
    p.add_argument("--wait", default="none")
    p.add_argument("--python", default="${command:python.interpreterPath}")
    p.add_argument("--json", action="store_true", help="accepted for symmetry; output is always JSON")
    _view_options(p)  # multi-node: a running job's real placement replaces --hosts (rtdebug.views.placement)


def _cmd_vscode(args) -> int:
    from rtdebug.commands import vsconfigs
    from rtdebug.common.ports import parse_rank_list

    if args.nproc_per_node < 1 or args.nnodes < 1:
        raise usage("--nproc-per-node and --nnodes must be >= 1")
    hosts = args.hosts.split(",") if args.hosts else None
    if hosts is not None and len(hosts) != args.nnodes:
        raise usage(f"--hosts lists {len(hosts)} hosts for --nnodes {args.nnodes}")
    parse_rank_list(args.wait, args.nproc_per_node * args.nnodes)
    endpoints = None
    if args.mode == "torchrun" and args.nnodes > 1:
        from rtdebug.views.placement import job_endpoints

        endpoints = job_endpoints(ViewOptions.from_args(args), args.nproc_per_node, args.nnodes, hosts)
    out = vsconfigs.generate(
        args.script,
        args.mode,
        args.nproc_per_node,
        args.nnodes,
        hosts,
        args.port_base,
        args.wait,
        args.python,
        endpoints,
    )
    print(json.dumps(out, indent=2))
    return 0


def _add_stacks(sub) -> None:
    p = sub.add_parser(
        "stacks",
        help="where is every rank? Python stacks of all ranks, grouped",
        description="Dump every thread's Python stack of each live rank (taken by the rank's own dump thread: no "
        "debugger, no ptrace, works while a rank is blocked in a C++ collective or stopped at a breakpoint) and "
        "group ranks by identical main-thread stack, with the verdict from torch's Flight Recorder. "
        "With no session here: the job $RTDEBUG_STORE or $RAY_ADDRESS names (as for ps).",
    )
    p.add_argument("--session", type=_session_id, help="session id (default: the newest live session)")
    p.add_argument(
        "--rank", metavar="RANKS", help="ranks to dump: 0 or 0,2-3, or mesh coordinates: dp=0,tp=* (default: all)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object (what the VS Code extension reads)")
    p.add_argument("--native", action="store_true", help="add native frames with py-spy (needs ptrace rights)")
    p.add_argument("--threads", action="store_true", help="also print every rank's other threads")
    p.add_argument("--pid", type=int, help="a job rtdebug did not start: its torchrun agent or a rank (py-spy)")
    p.add_argument("--store", metavar="HOST:PORT", help="every rank of a multi-node job, through its store")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="every worker of a Ray Train run, through its GCS")
    p.add_argument(
        "--history",
        type=int,
        nargs="?",
        const=16,
        metavar="N",
        help="each rank's last N collectives (default 16), aligned per group, the first divergence marked",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        metavar="S",
        help="a rank that has not answered after S seconds is listed as unresponsive (default 3)",
    )


def _cmd_stacks(args) -> int:
    from rtdebug.commands import stacks

    if args.pid is not None:  # a job rtdebug did not start (nor adopt): read-only, through py-spy
        from rtdebug.commands import pidstacks  # (py-spy's reader, loaded only for --pid)

        keys = ("session", "rank", "native", "store", "ray_address", "history")
        others = [k for k in keys if getattr(args, k) not in (None, False)]
        return pidstacks.command(args.pid, args.json, args.threads, args.timeout, others)
    return stacks.command(
        args.session,
        args.rank,
        args.json,
        args.native,
        args.timeout,
        args.threads,
        args.store,
        args.ray_address,
        args.history,
    )


def _add_adopt(sub) -> None:
    p = sub.add_parser(
        "adopt",
        help="give every rank of a running torchrun job or Ray Train worker (started without rtdebug) a debug endpoint",
        description="Adopt a running torchrun job or Ray Train worker: inject rtdebug's lazy debug endpoint "
        "(base + RANK), the stacks handler and a registry entry into each of its ranks. PID: the torchrun "
        "agent, any rank, or a Ray Train worker (default: the only torchrun job of yours on this machine; "
        "--list shows the candidates). Multi-node: adopt on each node; the ranks "
        "publish into the job's store (rtdebug ps --store), signed with RTDEBUG_JOB_SECRET (or _FILE) if set "
        "here, else listed as unverified.",
    )
    p.add_argument("pid", nargs="?", type=int, help="torchrun agent, rank or Ray Train worker pid")
    p.add_argument("--debug-port-base", type=int, default=DEFAULT_PORT_BASE, metavar="P", help="rank N on P + N")
    p.add_argument("--debug-host", default="127.0.0.1", metavar="H", help="address the endpoints bind")
    p.add_argument("--debug-allow", default="", metavar="ADDR|CIDR,...", help="other machines allowed in")
    p.add_argument("--json", action="store_true", help="print the session and its ranks as JSON")
    p.add_argument("--detach", type=_session_id, metavar="SESSION", help="undo an adoption; the job runs on")
    p.add_argument("--list", action="store_true", help="the jobs here you can adopt (--json: as JSON)")


def _cmd_adopt(args) -> int:
    from rtdebug.commands import adopt

    return adopt.command(args)


COMMANDS = {
    "run": (_add_run, _cmd_run),
    "torchrun": (_add_torchrun, _cmd_torchrun),
    "ps": (_add_ps, _cmd_ps),
    "attach": (_add_attach, _cmd_attach),
    "stop": (_add_stop, _cmd_stop),
    "vscode": (_add_vscode, _cmd_vscode),
    "stacks": (_add_stacks, _cmd_stacks),
    "adopt": (_add_adopt, _cmd_adopt),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rtdebug", description="Debug Ray Train local-mode and torchrun jobs: one debug port per rank."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.formatwarning = lambda msg, cat, *a, **k: f"rtdebug: warning: {msg}\n"
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command][1](args)
    except HarnessError as exc:
        print(f"rtdebug: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # argparse: usage errors exit 2 with their own message
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rtdebug stacks | head`: the reader left; say nothing, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
