"""Launcher side of multi-node torchrun: the job's store and ``--debug-host auto``.

With c10d rendezvous the nodes meet at ``--rdzv-endpoint``, where torchrun's
agent hosts a TCPStore; rtdebug's ranks publish their entries there
(``rtdebug.rank.publish``) so that any node sees every rank (``rtdebug.views.store``).
Everything here is decided from torchrun's own arguments, identically on every
node, before torchrun starts.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from rtdebug.common.errors import usage
from rtdebug.registry.c10d import split_endpoint

C10D_DEFAULT_PORT = 29400  # torchrun's default for a c10d endpoint without a port
AUTO = "auto"


def job_store(parsed: Any, max_nodes: int) -> str | None:
    """``host:port`` of the store torchrun's agents host for a multi-node job, else None.

    c10d: the rendezvous store at ``--rdzv-endpoint``. static: the agent store at
    ``--master-addr:--master-port`` (or the static endpoint), the one the ranks'
    ``init_process_group`` uses. A single-node job's registry sees every rank already."""
    if getattr(parsed, "standalone", False) or max_nodes <= 1:
        return None
    if parsed.rdzv_backend == "static":
        endpoint = parsed.rdzv_endpoint or f"{parsed.master_addr}:{parsed.master_port}"
    elif parsed.rdzv_backend == "c10d" and parsed.rdzv_endpoint:
        endpoint = parsed.rdzv_endpoint
    else:
        return None  # etcd and other backends: no store of torchrun's to publish into
    try:
        host, port = split_endpoint(endpoint, C10D_DEFAULT_PORT)
    except ValueError:
        return None  # torchrun reports its own malformed endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def fixed_job(parsed: Any) -> bool:
    """True when the job cannot go on without every node: fixed --nnodes, no restarts. Then a node
    whose peer is gone ends itself (``rtdebug.rank.publish``) instead of waiting in its next collective."""
    from torch.distributed.run import parse_min_max_nnodes

    try:
        low, high = parse_min_max_nnodes(parsed.nnodes)
    except (RuntimeError, ValueError):
        return False
    return low == high and int(getattr(parsed, "max_restarts", 0) or 0) == 0


def _rendezvous_host(parsed: Any) -> str | None:
    if parsed.rdzv_backend == "static" or not parsed.rdzv_endpoint:
        return getattr(parsed, "master_addr", None)
    try:
        return split_endpoint(parsed.rdzv_endpoint, C10D_DEFAULT_PORT)[0]
    except ValueError:
        return None


def route_address(peer: str) -> str:
    """The local address the kernel would use toward ``peer`` (a UDP connect sends nothing)."""
    infos = socket.getaddrinfo(peer, 9, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return str(s.getsockname()[0])


def resolve_debug_host(host: str, parsed: Any) -> str:
    """``--debug-host auto``: the address of this node that reaches the rendezvous host.

    Loopback stays loopback (a one-machine job keeps its endpoints private)."""
    if host != AUTO:
        return host
    peer = _rendezvous_host(parsed)
    if not peer or peer in ("localhost",):
        return "127.0.0.1"
    try:
        addr = route_address(peer)
    except OSError as exc:
        raise usage(f"--debug-host auto: no route to the rendezvous host {peer}: {exc.strerror or exc}") from None
    if ipaddress.ip_address(addr.split("%", 1)[0]).is_loopback:
        return "127.0.0.1"
    return addr
