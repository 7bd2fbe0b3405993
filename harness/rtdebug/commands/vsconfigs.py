"""Builders for VS Code debug configurations: the one source of their shape.

``rtdebug attach`` and ``rtdebug vscode`` print these, and the VS Code
extension calls ``python -m rtdebug vscode --json`` instead of keeping its own
copy. Everything here is stock ``"type": "debugpy"`` (runs with only the Python
Debugger installed) except "Attach to rank…", which needs the rtdebug extension
to turn the picked rank into host:port from the registry.
"""

from __future__ import annotations

from typing import Any

from rtdebug.common.config import HIDE_HARNESS
from rtdebug.common.ports import DEFAULT_PORT_BASE, ports_for_ranks

PREFIX = "rtdebug: "
BEGIN_PATTERN = r"^rtdebug: session \S+ starting"
END_PATTERN = r"^rtdebug: all \d+ local ranks ready"


def attach_config(
    name: str, host: str, port: int, remote_root: str = "${workspaceFolder}", just_my_code: bool = True
) -> dict[str, Any]:
    return {
        "name": name,
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": host, "port": port},
        "pathMappings": [{"localRoot": "${workspaceFolder}", "remoteRoot": remote_root}],
        "justMyCode": just_my_code,
        "rules": HIDE_HARNESS,
    }


def rank_config_name(rank: int, host: str, port: int) -> str:
    """Unique per endpoint, so configs generated for several scripts never overwrite each other's
    ports; the common case (loopback, default base) keeps the short name."""
    if host == "127.0.0.1" and port == DEFAULT_PORT_BASE + rank:
        return f"{PREFIX}attach rank {rank}"
    return f"{PREFIX}attach rank {rank} ({host}:{port})"


def single_process(script: str, port: int | None = None) -> dict[str, Any]:
    """F5 through rtdebug: VS Code's debugpy launches it, rtdebug sees the debugger and just runs the script."""
    return {
        "name": f"{PREFIX}{script} (single process)",
        "type": "debugpy",
        "request": "launch",
        "module": "rtdebug",
        "args": ["run", script],
        "cwd": "${workspaceFolder}",
        "console": "integratedTerminal",
        "justMyCode": True,
        "rules": HIDE_HARNESS,
    }


def torchrun_task(script: str, python: str, nproc: int, nnodes: int, port_base: int, wait: str) -> dict[str, Any]:
    args = [
        "-m",
        "rtdebug",
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--wait",
        wait,
        "--nproc-per-node",
        str(nproc),
    ]
    if nnodes > 1:
        args += ["--nnodes", str(nnodes)]
    return {
        "label": f"{PREFIX}torchrun {script}",
        "type": "process",
        "command": python,
        "args": [*args, script],
        "isBackground": True,
        "options": {"cwd": "${workspaceFolder}"},
        "problemMatcher": {
            "owner": "rtdebug",
            "source": "rtdebug",
            "pattern": {"regexp": r"^rtdebug: (?:rank \d+: )?(error: .*)$", "message": 1},
            "background": {"activeBegin": True, "beginsPattern": BEGIN_PATTERN, "endsPattern": END_PATTERN},
        },
    }


def rank_configs(
    nproc: int,
    nnodes: int,
    hosts: list[str] | None,
    port_base: int,
    endpoints: dict[int, tuple[str, int]] | None,
) -> list[dict[str, Any]]:
    """One attach configuration per rank (``port = base + rank`` on its node, or where the job put it)."""
    resolve_later = nnodes > 1 and not hosts and not endpoints
    hosts = hosts or ["127.0.0.1"] * nnodes
    out: list[dict[str, Any]] = []
    for rank, port in enumerate(ports_for_ranks(port_base, range(nproc * nnodes))):
        if resolve_later:
            name = f"{PREFIX}attach rank {rank} (placed at run time)"
            out.append({"name": name, "type": "rtdebug", "request": "attach", "rank": rank})
            continue
        host, port = endpoints[rank] if endpoints else (hosts[rank // nproc], port)
        out.append(attach_config(rank_config_name(rank, host, port), host, port))
    return out


def generate(
    script: str,
    mode: str = "torchrun",
    nproc: int = 2,
    nnodes: int = 1,
    hosts: list[str] | None = None,
    port_base: int = DEFAULT_PORT_BASE,
    wait: str = "none",
    python: str = "${command:python.interpreterPath}",
    endpoints: dict[int, tuple[str, int]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The configurations, compounds, tasks and inputs ``rtdebug: `` owns for one script.

    Multi-node: ``endpoints`` (rank -> host, port of a running job, from its store view) win;
    without them and without ``hosts`` a rank's node is unknown until run time (c10d), so each
    rank's config is resolved when it is launched (``type: rtdebug`` -> ``rtdebug attach --json``)."""
    out: dict[str, list[dict[str, Any]]] = {"configurations": [], "compounds": [], "tasks": [], "inputs": []}
    if mode == "run":
        out["configurations"].append(single_process(script))
        return out
    world = nproc * nnodes
    out["configurations"] += rank_configs(nproc, nnodes, hosts, port_base, endpoints)
    names = [c["name"] for c in out["configurations"]]
    out["configurations"].append(
        {
            "name": f"{PREFIX}attach to rank…",
            "type": "rtdebug",
            "request": "attach",
            "rank": "${input:rtdebugRank}",
        }
    )
    task = torchrun_task(script, python, nproc, nnodes, port_base, wait)
    out["tasks"].append(task)
    out["compounds"].append(
        {
            "name": f"{PREFIX}all ranks ({script})",
            "configurations": names,
            "preLaunchTask": task["label"],
            "stopAll": True,
        }
    )
    out["inputs"].append(
        {
            "id": "rtdebugRank",
            "type": "promptString",
            "description": f"Rank to attach to (0-{world - 1})",
            "default": "0",
        }
    )
    return out
