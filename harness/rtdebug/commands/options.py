"""The options more than one command shares, and how a command's options become one checked object.

``Options``: each command's dataclass, built from its argparse namespace in one place (``from_args``) and
checked in its ``__post_init__``, so a command's ``run`` never sees a combination the user got wrong.
``session_arg`` and ``view_options``: the ``--session`` type and the cluster views of ``ps``, ``attach``,
``stop`` and ``vscode``. ``debug_options``: the debug group shared by ``run`` and ``torchrun``, and how
they sit in front of torchrun's options (``torchrun`` reuses torchrun's own parser so its errors read
exactly as torchrun's).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

from rtdebug.common.config import DEFAULT_POST_MORTEM_WAIT_S, RAY_LOCAL_MODES
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
        values: dict[str, Any] = {n: getattr(ns, n) for n in names if n != "views"}
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
    """How Ray Train's local mode behaves in the ranks (``rtdebug.rank.raylocal``)."""
    g.add_argument(
        "--ray-local-mode",
        choices=RAY_LOCAL_MODES,
        default="cluster",
        help="what Ray Train's local mode means: cluster (default: barrier, broadcast, report(), checkpoints, "
        "restore, callbacks and FailureConfig behave as on a Ray cluster with num_workers = world size) or "
        "ray (Ray's own in-memory local mode)",
    )


def torchrun_parser() -> argparse.ArgumentParser:
    """torchrun's own parser plus rtdebug's group, so torchrun errors read exactly as torchrun's."""
    from torch.distributed.run import get_args_parser

    p = get_args_parser()
    p.prog = "rtdebug torchrun"
    p.description = (
        "Start the real torchrun with a debug endpoint in every rank (port = base + RANK). "
        "Harness options go before torchrun's; every torchrun option passes through."
    )
    ray_options(debug_options(p, "--debug-port-base", "--debug-host"))
    p.add_argument(
        "--wait",
        dest="wait_ranks",
        default="none",
        metavar="none|all|RANKS",
        help="ranks that block before user code until a client attaches, e.g. 0 or 0,2-3",
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
    return p


OUR_FLAGS = {
    "--debug-port-base": 1,
    "--debug-host": 1,
    "--debug-allow": 1,
    "--eager": 0,
    "--post-mortem": 0,
    "--post-mortem-wait": 1,
    "--pg-timeout": 1,
    "--wait": 1,
    "--force-local": 0,
    "--ray-local-mode": 1,
    "--stop-on": 1,
    "--check-collectives": 0,
    "--hang-report": 1,
}


def split_our_options(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Leading rtdebug options vs. the rest (torchrun options, script, script args)."""
    i = 0
    ours: list[str] = []
    while i < len(tokens):
        name = tokens[i].split("=", 1)[0]
        if name not in OUR_FLAGS:
            break
        n = 0 if "=" in tokens[i] else OUR_FLAGS[name]
        ours += tokens[i : i + 1 + n]
        i += 1 + n
    return ours, tokens[i:]
