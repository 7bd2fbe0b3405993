"""The key layout of a torchrun job's c10d store, as rtdebug uses it (the store view's record).

Ranks (``rtdebug.rank.publish``) write, the store view (``rtdebug.views.store``) reads, the launcher
(``rtdebug.launcher.multinode``) names the store: all three agree here on the keys under
``rtdebug/<run id>/`` (``rank/<N>``, ``node/<group rank>``, ``tick``, ``stop``; job-wide stacks' ``dump/...``
keys live with the rest of that protocol, in ``rtdebug.stacks.wire``), and on how heartbeats turn into
"lost". Every store connection rtdebug opens is the torch-free client (``rtdebug.registry.tcpstore``):
one per shell command (``StoreView.client``), and a rank's publisher and dump watcher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtdebug.registry.entry import LIVE_RANK_STATES

ENV_STORE = "RTDEBUG_JOB_STORE"  # host:port of the store the ranks publish to (set by the launcher)
ENV_WATCH = "RTDEBUG_PEER_WATCH"  # "1": a lost peer ends this node (set by the launcher)
PREFIX = "rtdebug"
HEARTBEAT_S = 2.0
CONNECT_TIMEOUT_S = 10.0
LOST_ROUNDS = 5  # the view shows a live rank this many rounds behind as lost (~10 s)
PEER_LOST_ROUNDS = 15  # a watching node ends itself when a peer is this far behind (~30 s)


def rank_key(run_id: str, rank: int) -> str:
    return f"{PREFIX}/{run_id}/rank/{rank}"


def node_key(run_id: str, group_rank: int) -> str:
    return f"{PREFIX}/{run_id}/node/{group_rank}"


def tick_key(run_id: str) -> str:
    return f"{PREFIX}/{run_id}/tick"


def rounds_behind(ranks: Sequence[Mapping[str, Any]], tick: int = 0) -> dict[int, float]:
    """Heartbeat rounds each live rank lags the job's logical clock (counted generously: ranks
    that stopped ticking still count as publishers, which only makes detection slower)."""
    live = [r for r in ranks if r.get("state") in LIVE_RANK_STATES]
    now = max([tick, *(int(r.get("tick", 0)) for r in live)])
    return {int(r["rank"]): (now - int(r.get("tick", 0))) / max(len(live), 1) for r in live}


def stop_key(run_id: str) -> str:
    """Set by ``rtdebug stop`` through the store view: every rank then stops its own launcher."""
    return f"{PREFIX}/{run_id}/stop"


def split_endpoint(endpoint: str, default_port: int = 29400) -> tuple[str, int]:
    """``host[:port]`` (IPv6 in brackets) -> (host, port), as torchrun parses its rdzv endpoint."""
    endpoint = endpoint.strip()
    if endpoint.startswith("["):
        host, _, rest = endpoint[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = endpoint.rpartition(":")
    if not sep or ":" in host:  # no port, or a bare IPv6 address
        return endpoint, default_port
    return host, int(port)
