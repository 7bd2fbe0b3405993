"""``rtdebug replay DIR --rank R``: one captured rank of a job, run alone as one process (docs/replay.md).

The shell's part: the capsule read and checked before anything starts (``rtdebug.capsule.read``: a damaged
or foreign capsule, a rank out of range or not captured, a tensor file that would need unpickling are each
one line), the script found (the captured path, or ``--script``) and compared with the captured one, and
rank R's environment and working directory handed to the one-process launcher as a ``ReplayTarget``
(``rtdebug.launcher.start.run_replay``: ``rtdebug run``'s path, with the rank's variables, a scratch folder
for checkpoints and Ray Train storage, and a session entry of mode ``replay``). The rank side
(``rtdebug.rank.replay.serve``) answers every collective from the capsule and checks what the rank sends.
``--info`` prints what ``rtdebug capsule DIR`` prints, and starts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rtdebug.commands import capsule as capsule_cmd
from rtdebug.commands.options import Options, debug_options
from rtdebug.common.config import DebugOptions, ReplayTarget, SingleRunOptions
from rtdebug.common.errors import HarnessError, printable, usage

SCRATCH = "scratch"  # DIR/scratch/rank-R: a replay's checkpoints and Ray Train storage


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayOptions(Options, DebugOptions):
    """The debug group's options (``DebugOptions``, what the launcher reads) and the replay's own."""

    capsule: str
    rank: int | None
    info: bool
    json: bool
    script: str | None
    stop_at_collective: int | None
    no_check: bool
    check_tolerance: float | None
    wait: bool

    def __post_init__(self) -> None:
        if self.info:
            if self.rank is not None and self.rank < 0:
                raise usage(f"--rank {self.rank} is out of range: ranks are >= 0")
            return
        if self.json:
            raise usage("replay: --json goes with --info")
        if self.rank is None:
            raise usage("replay: which rank? give --rank R (rtdebug capsule DIR lists the captured ones)")
        if self.rank < 0:
            raise usage(f"--rank {self.rank} is out of range: ranks are >= 0")
        if self.no_check and self.check_tolerance is not None:
            raise usage("replay: --check-tolerance means nothing with --no-check")
        if self.stop_at_collective is not None and self.stop_at_collective < 1:
            raise usage(f"--stop-at-collective must be >= 1 (numbered from 1), got {self.stop_at_collective}")
        if self.check_tolerance is not None and not 0 <= self.check_tolerance < float("inf"):
            raise usage(f"--check-tolerance must be a number >= 0, got {self.check_tolerance:g}")


OPTIONS = ReplayOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "replay",
        help=summary,
        description="Run one captured rank of a job alone, as one process, with a debug endpoint: every "
        "collective returns what that rank received in the job (capture with --capture DIR).",
    )
    p.add_argument("capsule", metavar="DIR", help="the folder --capture wrote")
    p.add_argument("--rank", type=int, metavar="R", help="the rank to replay")
    p.add_argument("--info", action="store_true", help="show the capsule (as `rtdebug capsule DIR`) and start nothing")
    p.add_argument("--json", action="store_true", help="with --info: one JSON object")
    p.add_argument(
        "--script",
        metavar="PATH",
        help="the script to run (default: the captured path; for a capsule made on another machine)",
    )
    g = p.add_argument_group("replay")
    g.add_argument(
        "--stop-at-collective",
        type=int,
        metavar="K",
        help="stop in the debugger before collective #K (numbered from 1, as `rtdebug capsule` counts them)",
    )
    g.add_argument(
        "--no-check",
        action="store_true",
        help="do not check what the rank sends against the capture (default: the first difference is said "
        "in one line, and stops in the debugger when a client is attached)",
    )
    g.add_argument(
        "--check-tolerance",
        type=float,
        metavar="X",
        help="allow an absolute difference up to X in what the rank sends (a GPU capture replayed on CPU)",
    )
    debug_options(p, "--port", "--host", "--allow")
    p.add_argument("--wait", action="store_true", help="block before the script until a client attaches")


def _script(opts: ReplayOptions, manifest: dict[str, Any]) -> tuple[str, bool]:
    """(the target to run, whether it is a module): ``--script``, else the captured one, which must be here."""
    if opts.script is not None:
        if not os.path.isfile(opts.script):
            raise usage(f"--script {opts.script}: not found")
        return os.path.abspath(opts.script), False
    script, module = manifest.get("script"), bool(manifest.get("module"))
    if not isinstance(script, str) or not script:
        raise HarnessError(f"{opts.capsule}: the manifest names no script (corrupted)")
    if not module and not os.path.isfile(script):
        raise HarnessError(f"the captured script {script} is not here; give --script PATH")
    return script, module


def _cwd(manifest: dict[str, Any], script: str, module: bool) -> str:
    cwd = manifest.get("cwd")
    if isinstance(cwd, str) and os.path.isdir(cwd):
        return cwd
    return os.getcwd() if module else os.path.dirname(os.path.abspath(script))


def run(opts: ReplayOptions) -> int:
    from rtdebug.capsule.read import open_capsule

    cap = open_capsule(opts.capsule)
    if opts.info:
        s = capsule_cmd.summary(cap, opts.script)
        print(json.dumps(s, indent=1) if opts.json else capsule_cmd.describe(s))
        return 0
    assert opts.rank is not None
    cap.check_rank(opts.rank)
    log = cap.rank(opts.rank)
    log.check_tensors()  # a damaged or pickled tensor file: one line before anything starts
    if log.end_reason.startswith("interrupted"):  # Ctrl-C or rtdebug stop ended the captured job
        print(
            f"rtdebug: the captured job was {printable(log.end_reason[:40])}: rank {opts.rank}'s capture holds "
            f"collectives #1-#{log.complete_upto}; a replay that goes further stops there",
            file=sys.stderr,
        )
    script, module = _script(opts, cap.manifest)
    today = capsule_cmd.script_state(cap.manifest, None if module else script)
    if today["state"] == "differs":
        print(
            f"rtdebug: {printable(script)} is not the captured script (sha256 differs): the replay says where the rank "
            "first sends something else",
            file=sys.stderr,
        )
    device = cap.manifest.get("device")
    if isinstance(device, str) and device != "cpu" and not opts.no_check and not opts.check_tolerance:
        print(
            f"rtdebug: a {printable(device[:40])} capture: where the script runs on CPU here, what the rank sends "
            "differs by rounding; give --check-tolerance X (or --no-check)",
            file=sys.stderr,
        )
    argv = cap.manifest.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise HarnessError(f"{opts.capsule}: the manifest's argv is not a list of strings (corrupted)")
    root = Path(opts.capsule).absolute()
    replay = ReplayTarget(
        capsule=str(root),
        rank=opts.rank,
        world_size=cap.world_size,
        env=cap.env(opts.rank),
        cwd=_cwd(cap.manifest, script, module),
        scratch=str(root / SCRATCH / f"rank-{opts.rank}"),
        check=not opts.no_check,
        tolerance=opts.check_tolerance or 0.0,
        stop_at=opts.stop_at_collective or 0,
        runs=shlex.join([*(["-m"] if module else []), script, *argv]),  # the capsule chooses it: said at start
    )
    from rtdebug.launcher import start  # the launcher, loaded only by the commands that start a job

    return start.run_replay(_run_args(opts, script, module, argv), replay)


def _run_args(opts: ReplayOptions, script: str, module: bool, argv: list[str]) -> SingleRunOptions:
    """What ``rtdebug run``'s launcher path reads (``rtdebug.launcher.single``)."""
    shared = {f.name: getattr(opts, f.name) for f in dataclasses.fields(DebugOptions)}
    return SingleRunOptions(**shared, target=script, args=list(argv), module=module, wait=opts.wait)
