"""The port rule and port checks.

``port = base + RANK`` (global rank). Never LOCAL_RANK: torchrun may give every
worker LOCAL_RANK=0, and global ranks keep ports distinct across nodes.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from rtdebug.common.errors import HarnessError, usage

DEFAULT_PORT_BASE = 5678
MAX_PORT = 65535


def port_for_rank(base: int, rank: int) -> int:
    port = base + rank
    if not 1 <= port <= MAX_PORT:
        raise usage(f"debug port {port} for rank {rank} is outside 1-{MAX_PORT}; lower --debug-port-base")
    return port


def ports_for_ranks(base: int, ranks: Iterable[int]) -> list[int]:
    ranks = list(ranks)
    if ranks and base + max(ranks) > MAX_PORT:
        raise usage(
            f"--debug-port-base {base} + world size {max(ranks) + 1} goes beyond port {MAX_PORT}; "
            f"use a base of at most {MAX_PORT - max(ranks)}"
        )
    return [port_for_rank(base, r) for r in ranks]


def is_port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing is bound to ``host:port`` (TIME_WAIT leftovers do not count: servers reuse those)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free on ``host`` now (``rtdebug connect``'s local end of a forward)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_holder(port: int) -> str | None:
    """Describe the process bound to ``port`` (``"python (pid 123)"``), if psutil can see it."""
    import psutil  # only on an error path: not on a rank's start path

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for c in conns:
        if c.laddr and c.laddr.port == port and c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE):
            if c.pid is None:
                return "another user's process"
            try:
                p = psutil.Process(c.pid)
                return f"{p.name()} (pid {c.pid}: {' '.join(p.cmdline()[:4])})"
            except psutil.Error:
                return f"pid {c.pid}"
    return None


def check_ports_free(ports: Iterable[int], host: str = "127.0.0.1") -> None:
    """Raise a one-line error naming the holder of the first busy port."""
    for port in ports:
        if not is_port_free(port, host):
            holder = port_holder(port) or "an unknown process"
            raise HarnessError(
                f"debug port {port} is already in use by {holder}; pick another range with --debug-port-base"
            )


def parse_rank_list(text: str, world_size: int | None = None, flag: str = "--wait") -> frozenset[int] | None:
    """Parse a ``--wait`` policy (or another ``flag``'s ranks): ``none`` -> empty, ``all`` -> None (every rank),
    else ``0,2-3``."""
    value = text.strip().lower()
    if value in ("none", ""):
        return frozenset()
    if value == "all":
        return None
    ranks: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), int(hi_s)
                if lo > hi:
                    raise ValueError
                ranks.update(range(lo, hi + 1))
            else:
                ranks.add(int(part))
        except ValueError:
            raise usage(f"invalid {flag} value {text!r}: use none, all, or ranks like 0,2-3") from None
    if any(r < 0 for r in ranks):
        raise usage(f"invalid {flag} value {text!r}: ranks are >= 0")
    if world_size is not None:
        bad = sorted(r for r in ranks if r >= world_size)
        if bad:
            raise usage(f"invalid {flag} value {text!r}: rank {bad[0]} >= world size {world_size}")
    return frozenset(ranks)
