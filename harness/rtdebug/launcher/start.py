"""The launcher's entry point for the shell: ``rtdebug run`` and ``rtdebug torchrun`` start here.

The shell's two commands that start a job (``rtdebug.commands.run``, ``.torchrun``) import this module lazily,
so that ``ps``/``attach``/``stop`` never load the launcher.
"""

from __future__ import annotations

import argparse
import dataclasses

from rtdebug.common import selector
from rtdebug.common.config import ReplayTarget, SingleRunOptions, TorchrunDebugOptions
from rtdebug.common.ports import parse_rank_list
from rtdebug.launcher import capture, multinode
from rtdebug.launcher.single import run_single
from rtdebug.launcher.torchrun import Launcher, TorchrunPlan, plan_torchrun
from rtdebug.registry.entry import new_session_id
from rtdebug.registry.files import Registry

__all__ = ["run_replay", "run_single", "run_torchrun"]


def run_torchrun(parsed: argparse.Namespace, opts: TorchrunDebugOptions, tokens: list[str]) -> int:
    """``rtdebug torchrun``: ``parsed`` is torchrun's own parser's namespace (plus ours), ``opts`` rtdebug's
    options taken out of it, ``tokens`` torchrun's options, the script and its arguments."""
    plan = plan_torchrun(parsed, tokens)
    cfg = opts.rank_config(
        new_session_id(),
        host=multinode.resolve_debug_host(opts.host, parsed),
        wait=opts.wait_ranks,
        check_collectives=opts.check_collectives,
        hang_report_s=opts.hang_report,
        capture_ranks=opts.capture_ranks or "",
    )
    if not selector.is_mesh(cfg.wait):
        parse_rank_list(cfg.wait, plan.max_world_size)
    if cfg.capture_dir:  # checked above; the folder is made last, once nothing else can refuse the job
        cfg = dataclasses.replace(
            cfg,
            capture_dir=capture.prepare(cfg.capture_dir, own_ranks(plan), cfg.capture_ranks, plan.max_world_size),
            launch=capture.launch_facts(
                "torchrun", plan.target, cfg.session_id, plan.nnodes, plan.nproc_per_node, plan.torchrun_options
            ),
        )
    return Launcher(plan, cfg, Registry()).run()


def own_ranks(plan: TorchrunPlan) -> list[int]:
    """The ranks this node will surely run: a dynamic rendezvous (no node rank yet) names none, so a folder
    shared by the nodes is not refused for the ranks another node is writing."""
    return plan.local_ranks if plan.node_rank is not None else []


def run_replay(opts: SingleRunOptions, replay: ReplayTarget) -> int:
    """``rtdebug replay``: ``rtdebug run``'s one process, as rank ``replay.rank`` of the capsule."""
    return run_single(opts, replay)
