"""Rank side of the store view: publish this rank's entry into the job's own c10d store.

Multi-node ranks cannot see each other's registry files, but every rank of a
torchrun job can reach the store torchrun already runs (the c10d rendezvous
store at ``--rdzv-endpoint``). Each rank keeps ``rtdebug/<run id>/rank/<N>``
there current (its registry entry plus a heartbeat); local rank 0 also
publishes its node's session entry under ``rtdebug/<run id>/node/<group rank>``.
``harness.store_view`` reads them back from any machine that reaches the store.

Why a background thread that connects lazily: the rank's startup and steps must
never wait on the network, and a store that is not up yet (the agent hosting
it is still in rendezvous) or already gone must cost the rank nothing but a
retry. The thread is hidden from pydevd, so a breakpoint that suspends every
thread does not freeze the heartbeat (a paused rank stays visible as alive).

Liveness without trusting clocks: every heartbeat also advances one shared
counter in the store (``tick``), so a rank that stopped publishing falls behind
the job's logical clock in heartbeat rounds, whatever the machines' clocks say.
When a whole node dies, torchrun ends the others only once they reach a
collective; a node whose own rank is paused at a breakpoint would wait for ever.
So local rank 0 of each node watches its peers and, in a job that cannot go on
without them (fixed ``--nnodes``, no restarts), ends its own node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from harness.imports import when_imported

ENV_STORE = "RTDEBUG_JOB_STORE"  # host:port of the store the ranks publish to (set by the launcher)
ENV_WATCH = "RTDEBUG_PEER_WATCH"  # "1": a lost peer ends this node (set by the launcher)
PREFIX = "rtdebug"
HEARTBEAT_S = 2.0
CONNECT_TIMEOUT_S = 10.0
LIVE_STATES = ("starting", "ready", "attached")
LOST_ROUNDS = 5  # the view shows a live rank this many rounds behind as lost (~10 s)
PEER_LOST_ROUNDS = 15  # a watching node ends itself when a peer is this far behind (~30 s)


def rank_key(run_id: str, rank: int) -> str:
    return f"{PREFIX}/{run_id}/rank/{rank}"


def node_key(run_id: str, group_rank: int) -> str:
    return f"{PREFIX}/{run_id}/node/{group_rank}"


def tick_key(run_id: str) -> str:
    return f"{PREFIX}/{run_id}/tick"


def rounds_behind(ranks: list[dict[str, Any]], tick: int = 0) -> dict[int, float]:
    """Heartbeat rounds each live rank lags the job's logical clock (counted generously: ranks
    that stopped ticking still count as publishers, which only makes detection slower)."""
    live = [r for r in ranks if r.get("state") in LIVE_STATES]
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


def reachable(host: str, port: int, timeout: float = 2.0) -> str | None:
    """This machine's address toward the store if a plain TCP connect works, else None.

    Tried first because a TCPStore client that cannot connect retries for its whole
    timeout and prints C++ stack traces, which a rank's log must not fill up with."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            return str(s.getsockname()[0])
    except OSError:
        return None


def connect(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S, quiet: bool = False):
    """A TCPStore client (never a server: torchrun's agent owns the store). ``quiet``: a CLI
    process that has not imported torch yet keeps c10d's C++ warnings out of its output."""
    if quiet and "torch" not in sys.modules:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from torch.distributed import TCPStore

    return TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))


class Publisher:
    """Keeps one rank's entry (and its node's) current in the store; never blocks the caller."""

    def __init__(
        self,
        host: str,
        port: int,
        run_id: str,
        rank: int,
        group_rank: int | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        launcher_pid: int | None = None,
        watch_peers: bool = False,
    ) -> None:
        self.host, self.port, self.run_id, self.rank = host, port, run_id, rank
        self.group_rank = group_rank
        self.launcher_pid = launcher_pid
        self.where = {"hostname": socket.gethostname()}
        self._stop_sent = False
        self.watch_peers = watch_peers
        self.heartbeat_s = heartbeat_s
        self._entry: dict[str, Any] | None = None
        self.node: dict[str, Any] | None = None  # this node's session entry (local rank 0 only)
        self._cv = threading.Condition()
        self._version = 0  # bumped by every update
        self._sent = 0  # the version the store last acknowledged
        self._closed = False
        self._connected = False  # flush() waits only while the store answers
        self._thread: threading.Thread | None = None

    def update(self, entry: dict[str, Any], final: bool = False) -> None:
        """Record the newest entry and wake the thread (started on first use). ``final``: the rank
        is ending, so wait (bounded) until the store has it, then stop the thread."""
        with self._cv:
            self._entry = dict(entry)
            self._version += 1
            self._cv.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"rtdebug-publish-{self.rank}", daemon=True)
            self._thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
            self._thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
            # Start only once the rank's own code has imported torch.distributed: importing torch from this
            # thread while the main thread imports it too aborted a rank ("terminate called after throwing
            # an instance of 'python_error'", SIGABRT) in a clean-clone CI run.
            when_imported("torch.distributed", lambda _m, t=self._thread: t.start())
        if final:
            self.flush()
            self.close()

    def flush(self, timeout: float = 3.0) -> bool:
        """Wait (bounded) until the store has the newest entry (not at all if it is unreachable)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            want = self._version
            started = self._thread is not None and self._thread.ident is not None
            while started and self._sent < want and (self._connected or self._sent == 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self, timeout: float = 3.0) -> None:
        """Stop the thread and wait (bounded) until it is out of any store call: a daemon thread
        still inside C++ when the interpreter exits can abort the process (and fail the rank)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        t = self._thread
        if t is not None and t.ident is not None and t is not threading.current_thread():  # started
            t.join(timeout)

    def _loop(self) -> None:
        store = None
        delay = 0.2
        while True:
            with self._cv:
                if self._sent == self._version and store is not None and not self._closed:
                    self._cv.wait(self.heartbeat_s)  # woken by an update, else a heartbeat
                if self._closed:
                    return
                entry, node, version = self._entry, self.node, self._version
            try:
                if store is None:
                    node_ip = reachable(self.host, self.port)
                    if node_ip is None:
                        raise OSError("store not reachable yet")
                    store = connect(self.host, self.port)
                    self.where["node_ip"] = node_ip
                beat = {"heartbeat": time.time(), "tick": store.add(tick_key(self.run_id), 1)}
                keys = [rank_key(self.run_id, self.rank)]
                values = [json.dumps(dict(entry or {}, **self.where, **beat)).encode()]
                if node is not None and self.group_rank is not None:
                    keys.append(node_key(self.run_id, self.group_rank))
                    values.append(json.dumps(dict(node, **self.where, **beat)).encode())
                store.multi_set(keys, values)
                delay = 0.2
                with self._cv:
                    self._sent = max(self._sent, version)
                    self._connected = True
                    self._cv.notify_all()  # flush() waiters
                if not self._stop_sent and store.check([stop_key(self.run_id)]):
                    self._stop_launcher()
                if self.watch_peers and not self._stop_sent:
                    self._watch(store, beat["tick"])
            except Exception:  # the store is not up yet, or gone with the job: retry, quietly
                store = None
                with self._cv:
                    self._connected = False
                    self._cv.notify_all()
                    self._cv.wait(delay)
                delay = min(delay * 2, 5.0)

    def _watch(self, store: Any, tick: int) -> None:
        prefix = f"{PREFIX}/{self.run_id}/rank/"
        keys = [k for k in store.list_keys() if k.startswith(prefix) and k[len(prefix) :].isdigit()]
        ranks = [json.loads(v) for v in store.multi_get(keys)] if keys else []
        behind = rounds_behind(ranks, tick)
        gone = [r for r in ranks if behind.get(int(r["rank"]), 0) > PEER_LOST_ROUNDS]
        if gone:
            r = gone[0]
            print(
                f"rtdebug: rank {self.rank}: rank {r['rank']} (node {r.get('node_ip', '?')}) has not been heard "
                f"from for ~{PEER_LOST_ROUNDS * HEARTBEAT_S:.0f}s; ending this node (the job cannot go on without it)",
                file=sys.stderr,
                flush=True,
            )
            self._stop_launcher()

    def _stop_launcher(self) -> None:
        """``rtdebug stop`` from another machine: end this node the way a local ``stop`` would."""
        self._stop_sent = True
        if self.launcher_pid:
            try:
                os.kill(self.launcher_pid, signal.SIGTERM)
            except OSError:
                pass


def from_env(rank: int, environ: Mapping[str, str] | None = None) -> Publisher | None:
    """The rank's publisher when the launcher named a job store, else None (single node)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    endpoint = env.get(ENV_STORE)
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if not endpoint or not run_id:
        return None
    host, port = split_endpoint(endpoint)
    group = env.get("GROUP_RANK")
    launcher = env.get("RTDEBUG_LAUNCHER_PID", "")
    return Publisher(
        host,
        port,
        run_id,
        rank,
        int(group) if group and group.isdigit() else None,
        launcher_pid=int(launcher) if launcher.isdigit() else None,
        watch_peers=env.get(ENV_WATCH) == "1" and env.get("LOCAL_RANK", "0") == "0",
    )


def attach(record: Any, rank: int, local_rank: int) -> Publisher | None:
    """Give a rank's ``RankRecord`` a publisher when its job has a store; local rank 0 also
    publishes its node's session entry (what ``ps`` on another machine shows for this node)."""
    pub = from_env(rank)
    if pub is None:
        return None
    node = record.registry.read_session(record.entry["session_id"]) if local_rank == 0 else None
    pub.node = dict(node) if node else None
    record.publisher = pub
    pub.update(record.entry)
    return pub
