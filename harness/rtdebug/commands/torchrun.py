"""``rtdebug torchrun``: the real torchrun, with a debug endpoint in every rank.

Its options are torch's own parser plus rtdebug's group (``options.torchrun_parser``), so every torchrun
flag passes through. Our subparser only takes the words after ``torchrun``: rtdebug's options and torchrun's
go before the script in any order (their names never collide), and what follows the script is the script's.
torchrun gets its own options back (``options.without_our_options``). A mistake is one line (``UsageParser``),
never torchrun's 26-line usage. torch is an extra: without it, one line.
The launcher (``rtdebug.launcher.start``) is imported only when the job starts.

torch is imported here, for its parser, with the cyclic GC off, and what it loaded is then frozen
(``gc.freeze``): a full collection of the launcher's heap once torch is in it took 50-100 ms (2 vCPUs),
once on the way to the fork of the agent and again in the launcher while the ranks start; frozen objects
are never traversed again, in the launcher or in the agent it forks (``rtdebug.launcher.agent``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util

from rtdebug.commands.options import Options, our_flags, torchrun_parser, without_our_options
from rtdebug.common.config import TorchrunDebugOptions
from rtdebug.common.errors import HarnessError


@dataclasses.dataclass(frozen=True, kw_only=True)
class TorchrunOptions(Options):
    """``parsed``: torch's parser's namespace plus ours; ``rest``: torchrun's options, the script and its
    arguments (ours, wherever they were before the script, taken out). ``parsed`` is None when help was asked
    for (``-h``) or nothing was given; ``rest`` is then the words as given."""

    rest: list[str]
    parsed: argparse.Namespace | None = None
    debug: TorchrunDebugOptions | None = None  # rtdebug's own options out of ``parsed``, typed for the launcher

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> TorchrunOptions:
        if importlib.util.find_spec("torch") is None:  # torch is an extra: `rtdebug run` needs none
            raise HarnessError("rtdebug torchrun needs PyTorch (pip install torch); `rtdebug run` works without it")
        tokens = ns.rest
        if not tokens or tokens[0] in ("-h", "--help"):
            return cls(rest=tokens)
        parser = frozen_torchrun_parser()
        parsed = parser.parse_args(tokens)
        script_at = len(tokens) - len(parsed.training_script_args) - 1
        rest = without_our_options(tokens[:script_at], our_flags(parser)) + tokens[script_at:]
        debug = TorchrunDebugOptions(
            **{f.name: getattr(parsed, f.name) for f in dataclasses.fields(TorchrunDebugOptions)}
        )
        return cls(rest=rest, parsed=parsed, debug=debug)


OPTIONS = TorchrunOptions


def frozen_torchrun_parser() -> argparse.ArgumentParser:
    """``torchrun_parser()``, its torch import run with the GC off, then everything loaded so far frozen.
    The import makes hardly any garbage (a collection after it finds a handful of objects); the frozen
    modules live as long as the launcher does anyway."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return torchrun_parser()
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    sub.add_parser("torchrun", add_help=False, help=summary, prefix_chars="\0").add_argument(
        "rest", nargs=argparse.REMAINDER
    )


def run(opts: TorchrunOptions) -> int:
    if opts.parsed is None or opts.debug is None:
        torchrun_parser().print_help()
        return 0 if opts.rest else 2
    from rtdebug.launcher import start  # the launcher, loaded only by the commands that start a job

    return start.run_torchrun(opts.parsed, opts.debug, opts.rest)
