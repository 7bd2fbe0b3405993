"""``rtdebug run``: one process (local mode) with a debug endpoint.

The launcher does the work (``rtdebug.launcher.start.run_single``), imported only here and only when the
command runs, so no other command loads it. Its checks (host, ports, the script) are the launcher's, as
for ``torchrun``: they need the machine, not just the flags.
"""

from __future__ import annotations

import argparse
import dataclasses

from rtdebug.commands.options import Options, all_stop_options, capture_options, debug_options, ray_options
from rtdebug.common.config import SingleRunOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions(Options, SingleRunOptions):
    """``rtdebug run``'s options: the fields are what the launcher reads (``SingleRunOptions``, in
    ``rtdebug.common.config``: the launcher may not import the shell), built as every command's are."""


OPTIONS = RunOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "run",
        help=summary,
        description="Run a script (or -m module) in this process with a debug endpoint.",
    )
    ray_options(debug_options(p, "--port", "--host", "--allow"))
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
    all_stop_options(p)
    capture_options(p, ranks=False)
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module")
    p.add_argument("target", help="script path (or module name with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def run(opts: RunOptions) -> int:
    from rtdebug.launcher import start  # the launcher, loaded only by the commands that start a job

    return start.run_single(opts)
