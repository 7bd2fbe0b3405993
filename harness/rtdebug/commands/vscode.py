"""``rtdebug vscode``: print the configurations, compound, task and inputs for one script, as JSON.

The VS Code extension runs this and writes the answer into ``.vscode/`` instead of keeping its own copy;
the shapes are ``vsconfigs``'. A multi-node job that is running here or in its store gives its ranks'
real placement, which replaces the ``--hosts`` guess (``rtdebug.views.placement``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from rtdebug.commands import vsconfigs
from rtdebug.commands.options import Options, view_options
from rtdebug.common import selector
from rtdebug.common.errors import usage
from rtdebug.common.ports import DEFAULT_PORT_BASE, parse_rank_list
from rtdebug.views.api import ViewOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class VscodeOptions(Options):
    script: str
    mode: str = "torchrun"
    nproc_per_node: int = 2
    nnodes: int = 1
    hosts: str | None = None  # comma-separated, one per node
    port_base: int = DEFAULT_PORT_BASE
    wait: str = "none"
    python: str = "${command:python.interpreterPath}"
    json: bool = False  # accepted for symmetry; output is always JSON
    views: ViewOptions = dataclasses.field(default_factory=ViewOptions)

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise usage("--nproc-per-node and --nnodes must be >= 1")
        if self.host_list is not None and len(self.host_list) != self.nnodes:
            raise usage(f"--hosts lists {len(self.host_list)} hosts for --nnodes {self.nnodes}")
        if selector.is_mesh(self.wait):  # --wait tp=1: the ranks decide once their DeviceMesh places them
            selector.parse(self.wait, "--wait")
        else:
            parse_rank_list(self.wait, self.nproc_per_node * self.nnodes)

    @property
    def host_list(self) -> list[str] | None:
        return self.hosts.split(",") if self.hosts else None


OPTIONS = VscodeOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "vscode",
        help=summary,
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
    view_options(p)  # multi-node: a running job's real placement replaces --hosts (rtdebug.views.placement)


def run(opts: VscodeOptions) -> int:
    endpoints = None
    if opts.mode == "torchrun" and opts.nnodes > 1:
        from rtdebug.views.placement import job_endpoints

        endpoints = job_endpoints(opts.views, opts.nproc_per_node, opts.nnodes, opts.host_list)
    out = vsconfigs.generate(
        opts.script,
        opts.mode,
        opts.nproc_per_node,
        opts.nnodes,
        opts.host_list,
        opts.port_base,
        opts.wait,
        opts.python,
        endpoints,
    )
    print(json.dumps(out, indent=2))
    return 0
