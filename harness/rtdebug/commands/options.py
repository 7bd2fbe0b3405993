"""The options more than one command shares, and how a command's options become one checked object.

``Options``: each command's dataclass, built from its argparse namespace in one place (``from_args``) and
checked in its ``__post_init__``, so a command's ``run`` never sees a combination the user got wrong.
``session_arg`` and ``view_options``: the ``--session`` type and the cluster views of ``ps``, ``attach``,
``stop`` and ``vscode``. ``debug_options``: the debug group shared by ``run`` and ``torchrun``, and how
they sit among torchrun's options (``torchrun_parser``: torchrun's own options, copied from its parser, and
rtdebug's, in any order before the script; ``without_our_options`` leaves torchrun its own).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from rtdebug.common.config import DEFAULT_POST_MORTEM_WAIT_S, RAY_LOCAL_MODES
from rtdebug.common.errors import UsageParser
from rtdebug.common.ports import DEFAULT_PORT_BASE
from rtdebug.common.rankenv import DEFAULT_PG_TIMEOUT_S
from rtdebug.registry.entry import valid_session_id

OptionsT = TypeVar("OptionsT", bound="Options")


@dataclasses.dataclass(frozen=True)
class Options:
    """A command's options: its fields are the argparse destinations it reads (same names), plus ``views``
    (``ViewOptions``: flags, else ``$RAY_ADDRESS`` / ``$RTDEBUG_STORE``) for the commands that have one."""

    @classmethod
    def from_args(cls: type[OptionsT], ns: argparse.Namespace) -> OptionsT:
        """The one place a namespace becomes options; the subclass's ``__post_init__`` then checks them."""
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        # a field with a default that this command's parser lacks keeps its default (``replay``: --capture)
        values: dict[str, Any] = {n: getattr(ns, n) for n in names if n != "views" and hasattr(ns, n)}
        if "views" in names:  # the views (and psutil, which their teardown uses) load only for these commands
            from rtdebug.views.api import ViewOptions

            values["views"] = ViewOptions.from_args(ns)
        return cls(**values)


def session_arg(text: str) -> str:
    """``--session``: one pattern for every session id (never a path)."""
    if not valid_session_id(text):
        raise argparse.ArgumentTypeError(f"invalid session id {text[:80]!r}; see `rtdebug ps`")
    return text


def view_options(p: argparse.ArgumentParser) -> None:
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


def debug_options(p: argparse.ArgumentParser, port_flag: str, host_flag: str, allow_flag: str = "--debug-allow") -> Any:
    g = p.add_argument_group("rtdebug")
    g.add_argument(
        port_flag,
        type=int,
        default=DEFAULT_PORT_BASE,
        dest="port",
        help=f"debug port (torchrun: base; rank N listens on base + N). Default {DEFAULT_PORT_BASE}",
    )
    g.add_argument(
        host_flag,
        default="127.0.0.1",
        dest="host",
        help="address debug endpoints bind (default 127.0.0.1; others print a warning). torchrun: "
        "auto = this node's address toward the rendezvous host (loopback jobs keep 127.0.0.1)",
    )
    g.add_argument(
        allow_flag,
        default="",
        dest="allow",
        metavar="ADDR|CIDR[,...]",
        help=f"with a non-loopback {host_flag}: other machines allowed to connect (default: none, "
        "i.e. this host's own addresses); on this host only your own uid gets in",
    )
    g.add_argument("--eager", action="store_true", help="start debugpy at once instead of on first attach")
    g.add_argument(
        "--post-mortem",
        action="store_true",
        help="keep a rank that raised alive and stop the debugger at the raise site",
    )
    g.add_argument(
        "--post-mortem-wait",
        type=float,
        default=DEFAULT_POST_MORTEM_WAIT_S,
        metavar="S",
        help=f"seconds a failed rank waits for a client (default {DEFAULT_POST_MORTEM_WAIT_S:g})",
    )
    g.add_argument(
        "--pg-timeout",
        type=float,
        default=DEFAULT_PG_TIMEOUT_S,
        metavar="S",
        help=f"default torch.distributed process-group timeout (default {DEFAULT_PG_TIMEOUT_S:g}s), "
        "so peers of a paused rank do not time out",
    )
    g.add_argument(
        "--stop-on",
        default="",
        metavar="COND[,COND]",
        help="stop every rank in the debugger when training goes wrong: nonfinite (a NaN/Inf in the loss or a "
        "DDP gradient bucket; nonfinite:deep also names the first module), disagree[:N] (replicas' parameters "
        "differ, checked every N optimizer steps, default 100), step=N (before optimizer step N)",
    )
    g.add_argument(
        "--force-local",
        action="store_true",
        help="run the script's Ray Train trainer in local mode (num_workers=0) whatever it asks for",
    )
    return g


def ray_options(g: Any) -> None:
    """How Ray Train's local mode behaves in the ranks (``rtdebug.rank.localmode``)."""
    g.add_argument(
        "--ray-local-mode",
        choices=RAY_LOCAL_MODES,
        default="cluster",
        help="what Ray Train's local mode means: cluster (default: barrier, broadcast, report(), checkpoints, "
        "restore, callbacks and FailureConfig behave as on a Ray cluster with num_workers = world size) or "
        "ray (Ray's own in-memory local mode)",
    )


def all_stop_options(p: argparse.ArgumentParser) -> None:
    """The job's all-stop, done by its ranks (``rtdebug.rank.allstop``, docs/all-stop.md): on unless turned off."""
    g = p.add_argument_group("all-stop (when one rank stops, the others pause; whatever client is attached)")
    g.add_argument(
        "--no-all-stop",
        action="store_false",
        dest="all_stop",
        help="one rank stops alone, as with plain debugpy (sets RTDEBUG_ALL_STOP=0 for the ranks)",
    )
    g.add_argument(
        "--no-continue-all",
        action="store_false",
        dest="continue_all",
        help="a continue continues only that rank; the others stay paused until continued in their own client "
        "(sets RTDEBUG_CONTINUE_ALL=0)",
    )


def _folder(value: str) -> str:
    """``--capture=``: an empty folder name is a mistake, never a job that runs without its capture."""
    if not value.strip():
        raise argparse.ArgumentTypeError("needs a folder, got an empty name")
    return value


def capture_options(p: argparse.ArgumentParser, ranks: bool) -> None:
    """``--capture DIR`` (``run`` and ``torchrun``), ``--capture-ranks`` (``torchrun``): see docs/replay.md."""
    g = p.add_argument_group("capture (replay a rank alone later: rtdebug replay DIR --rank R)")
    g.add_argument(
        "--capture",
        metavar="DIR",
        type=_folder,
        default=None,
        help="record what every collective returned to each rank into a capsule under DIR (made if missing; "
        "a rank already captured there is refused)",
    )
    if ranks:
        g.add_argument(
            "--capture-ranks",
            metavar="RANKS",
            default=None,
            help="the ranks that capture: all (default) or rank numbers, e.g. 1 or 0,2-3",
        )
    g.add_argument(
        "--capture-max-gb",
        type=float,
        default=None,
        metavar="N",
        help="bound each rank's capture to N GB: past it the capsule is closed at a collective and the job "
        "runs on (default: no bound)",
    )


def torchrun_parser() -> argparse.ArgumentParser:
    """torchrun's own parser (its options copied in as a parent) plus rtdebug's (``torchrun_options``)."""
    from torch.distributed.run import get_args_parser

    p = UsageParser(
        prog="rtdebug torchrun",
        description="Start the real torchrun with a debug endpoint in every rank (port = base + RANK). "
        "rtdebug's options and torchrun's go before the script, in any order; every torchrun option passes "
        "through.",
        parents=[get_args_parser()],
        add_help=False,  # the parent's -h is copied in
    )
    torchrun_options(p)
    return p


def torchrun_options(p: argparse.ArgumentParser) -> None:
    """rtdebug's own options of ``rtdebug torchrun`` (their names never collide with torchrun's: that is what
    lets them sit anywhere among torchrun's; ``tests/unit/test_cli.py`` checks it)."""
    ray_options(debug_options(p, "--debug-port-base", "--debug-host"))
    p.add_argument(
        "--wait",
        dest="wait_ranks",
        default="none",
        metavar="none|all|RANKS",
        help="ranks that block before user code until a client attaches, e.g. 0 or 0,2-3",
    )
    p.add_argument(
        "--dap-port",
        type=int,
        default=None,
        metavar="P",
        help="also serve one DAP endpoint for the whole job on 127.0.0.1:P (as `rtdebug dap`): a client "
        "attaches once and gets one child session per rank",
    )
    g = p.add_argument_group("hangs")
    g.add_argument(
        "--check-collectives",
        action="store_true",
        help="TORCH_DISTRIBUTED_DEBUG=DETAIL for the ranks: a collective mismatch fails at once, "
        "in one line naming the ranks and the ops",
    )
    g.add_argument(
        "--hang-report",
        type=float,
        default=None,
        metavar="S",
        dest="hang_report",
        help="write every rank's grouped stacks to the log when no rank's stack changed for S "
        "seconds (default: min(300, --pg-timeout/2); 0 = off). A failing rank always "
        "triggers a report of the others",
    )
    all_stop_options(p)
    capture_options(p, ranks=True)


def our_flags(parser: argparse.ArgumentParser) -> dict[str, int]:
    """Every option string of rtdebug's own in ``parser`` (``torchrun_parser()``: whatever torchrun's parser
    does not have), with the words it takes after it (0 or 1)."""
    from torch.distributed.run import get_args_parser

    # argparse keeps its actions in ``_actions``: the one place an option's strings and arity are listed
    torchs = {s for a in get_args_parser()._actions for s in a.option_strings}
    return {s: 0 if a.nargs == 0 else 1 for a in parser._actions for s in a.option_strings if s not in torchs}


def without_our_options(tokens: list[str], ours: dict[str, int]) -> list[str]:
    """``tokens`` (what comes before the script) less rtdebug's options and their values, wherever they are:
    what is left is torchrun's. An abbreviation of one of ours (``--pg-time``) is ours, as argparse took it."""
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.split("=", 1)[0]
        full = name if name in ours else _abbreviated(name, ours)
        if full is None:
            kept.append(token)
            i += 1
        else:
            i += 1 + (0 if "=" in token else ours[full])
    return kept


def _abbreviated(name: str, ours: dict[str, int]) -> str | None:
    if not name.startswith("--") or len(name) < 3:
        return None
    matches = [flag for flag in ours if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None
