"""Rank side of the store view: publish this rank's entry into the job's own c10d store.

Multi-node ranks cannot see each other's registry files, but every rank of a
torchrun job can reach the store torchrun already runs (the c10d rendezvous
store at ``--rdzv-endpoint``). Each rank keeps ``rtdebug/<run id>/rank/<N>``
there current (its registry entry plus a heartbeat); local rank 0 also
publishes its node's session entry under ``rtdebug/<run id>/node/<group rank>``.
``rtdebug.views.store`` reads them back from any machine that reaches the store.

Why a background thread that connects lazily: the rank's startup and steps must
never wait on the network, and a store that is not up yet (the agent hosting
it is still in rendezvous) or already gone must cost the rank nothing but a
retry. The thread is hidden from pydevd, so a breakpoint that suspends every
thread does not freeze the heartbeat (a paused rank stays visible as alive).

Liveness without trusting clocks: every heartbeat also advances one shared
counter in the store (``tick``), so a rank that stopped publishing falls behind
the job's logical clock in heartbeat rounds, whatever the machines' clocks say.
Only the timed heartbeat advances it: entry updates in between (a client came,
a refusal was counted) rewrite the entry with the last tick, so no burst of
updates on one rank can make its peers look lost.

Anyone who reaches the store can read and write it: entries are signed with the
job's secret (``RTDEBUG_JOB_SECRET``, from the launcher; ``rtdebug.registry.signing``)
and carry the script's name only, never its arguments or the command line.
When a whole node dies, torchrun ends the others only once they reach a
collective; a node whose own rank is paused at a breakpoint would wait for ever.
So local rank 0 of each node watches its peers and, in a job that cannot go on
without them (fixed ``--nnodes``, no restarts), ends its own node. A second hidden thread
(``rtdebug.rank.stacks.watch``) answers job-wide ``stacks`` requests through the same store.
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
from typing import Any

from rtdebug.common import log
from rtdebug.common.procinfo import is_alive
from rtdebug.common.threads import hidden_thread
from rtdebug.rank.stacks.watch import StoreWatch
from rtdebug.registry import signing
from rtdebug.registry.c10d import (
    CONNECT_TIMEOUT_S,
    ENV_STORE,
    ENV_WATCH,
    HEARTBEAT_S,
    PEER_LOST_ROUNDS,
    PREFIX,
    node_key,
    rank_key,
    rounds_behind,
    split_endpoint,
    stop_key,
    tick_key,
)
from rtdebug.registry.entry import problem
from rtdebug.registry.tcpstore import TCPStoreClient

PRIVATE = ("command", "args")  # never published: a command line may hold secrets


def public(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What of an entry goes to the store: no command line (the schema's ``command`` stays, empty)."""
    out = {k: v for k, v in entry.items() if k not in PRIVATE}
    if entry.get("kind") == "session":
        out["command"] = []
    return out


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
        secret: str | None = None,
        launcher_create_time: float | None = None,
    ) -> None:
        self.host, self.port, self.run_id, self.rank = host, port, run_id, rank
        self.group_rank = group_rank
        self.launcher_pid, self.launcher_create_time = launcher_pid, launcher_create_time
        self.secret = secret
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
        self.dumps: StoreWatch | None = None  # answers job-wide stacks requests (rtdebug.rank.stacks.watch)
        self._lists: bool | None = None  # does the server know LIST_KEYS (None: not asked yet)

    def update(self, entry: dict[str, Any], final: bool = False) -> None:
        """Record the newest entry and wake the thread (started on first use). ``final``: the rank
        is ending, so wait (bounded) until the store has it, then stop the thread."""
        with self._cv:
            self._entry = dict(entry)
            self._version += 1
            self._cv.notify_all()
        if self._thread is None:
            # torch-free (rtdebug.registry.tcpstore), so both start at once: a rank stuck before its first
            # step is published and answers; torch's client, imported from this thread while the main
            # thread imported torch, once aborted a rank (SIGABRT) in a clean-clone CI run
            self._thread = hidden_thread(self._loop, f"rtdebug-publish-{self.rank}")
            self.dumps = StoreWatch(self.host, self.port, self.run_id, self.rank, self.secret, self.where).start()
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
        if self.dumps is not None:
            self.dumps.close()
        t = self._thread
        if t is not None and t.ident is not None and t is not threading.current_thread():  # started
            t.join(timeout)

    def _values(self, entry: dict[str, Any] | None, node: dict[str, Any] | None, beat: dict[str, Any]):
        """The keys and signed values to write: this rank's entry, and its node's (local rank 0)."""
        out = {rank_key(self.run_id, self.rank): dict(public(entry or {}), **self.where, **beat)}
        if node is not None and self.group_rank is not None:
            out[node_key(self.run_id, self.group_rank)] = dict(public(node), **self.where, **beat)
        keys = list(out)
        return keys, [json.dumps(signing.sign(k, out[k], self.secret)).encode() for k in keys]

    def _loop(self) -> None:
        store = None
        delay = 0.2
        beat: dict[str, Any] = {}
        next_beat = 0.0  # monotonic time of the next heartbeat: the only thing that advances the tick
        while True:
            with self._cv:
                if self._sent == self._version and store is not None and not self._closed:
                    self._cv.wait(max(0.0, next_beat - time.monotonic()))  # an update, else the heartbeat
                if self._closed:
                    return
                entry, node, version = self._entry, self.node, self._version
            try:
                if store is None:  # the torch-free client: a store not up yet fails at once, quietly
                    store = TCPStoreClient(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
                    self.where["node_ip"] = str(store.sock.getsockname()[0])
                timed = time.monotonic() >= next_beat or not beat
                if timed:
                    beat = {"heartbeat": time.time(), "tick": store.add(tick_key(self.run_id), 1)}
                    next_beat = time.monotonic() + self.heartbeat_s
                store.multi_set(*self._values(entry, node, beat))
                delay = 0.2
                with self._cv:
                    self._sent = max(self._sent, version)
                    self._connected = True
                    self._cv.notify_all()  # flush() waiters
                if timed:
                    self._after_beat(store, beat["tick"])
            except Exception:  # the store is not up yet, or gone with the job: retry, quietly
                log.swallowed("rank.publish: the store is not up yet, or gone with the job: retry, quietly")
                if store is not None:
                    store.close()
                store = None
                with self._cv:
                    self._connected = False
                    self._cv.notify_all()
                    self._cv.wait(delay)
                delay = min(delay * 2, 5.0)

    def _after_beat(self, store: Any, tick: int) -> None:
        if not self._stop_sent and store.check([stop_key(self.run_id)]):
            self._stop_launcher()
        if self.watch_peers and not self._stop_sent:
            self._watch(store, tick)

    def _watch(self, store: Any, tick: int) -> None:
        keys = self._rank_keys(store)
        ranks = []
        for value in store.multi_get(keys) if keys else []:
            try:
                entry = json.loads(value)
            except ValueError:
                continue
            if problem(entry, "rank") is None and isinstance(entry.get("tick", 0), int):
                ranks.append(entry)  # junk anyone wrote into the store is no peer
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

    def _rank_keys(self, store: Any) -> list[str]:
        """Every rank's key: listed where the server can list keys (LIST_KEYS came in a later torch than
        rtdebug supports), else named from the world size. The server is asked once: an old one closes
        the connection on a query it does not know, and the loop reconnects."""
        prefix = f"{PREFIX}/{self.run_id}/rank/"
        if self._lists is not False:
            try:
                keys = [k for k in store.list_keys() if k.startswith(prefix) and k[len(prefix) :].isdigit()]
                self._lists = True
                return keys
            except Exception:
                if self._lists is None:
                    self._lists = False
                raise
        world = (self._entry or {}).get("world_size")
        return [rank_key(self.run_id, r) for r in range(world if isinstance(world, int) else 0)]

    def _stop_launcher(self) -> None:
        """``rtdebug stop`` from another machine: end this node the way a local ``stop`` would."""
        self._stop_sent = True
        ct = self.launcher_create_time
        if self.launcher_pid and (ct is None or is_alive(self.launcher_pid, ct)):  # never a reused pid
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
    try:
        launcher_ct: float | None = float(env.get("RTDEBUG_LAUNCHER_CT", ""))
    except ValueError:
        launcher_ct = None
    return Publisher(
        host,
        port,
        run_id,
        rank,
        int(group) if group and group.isdigit() else None,
        launcher_pid=int(launcher) if launcher.isdigit() else None,
        watch_peers=env.get(ENV_WATCH) == "1" and env.get("LOCAL_RANK", "0") == "0",
        secret=env.get(signing.ENV_SECRET) or None,
        launcher_create_time=launcher_ct,
    )


def attach(record: Any, rank: int, local_rank: int) -> Publisher | None:
    """Give a rank's ``RankState`` a publisher when its job has a store; local rank 0 also
    publishes its node's session entry (what ``ps`` on another machine shows for this node)."""
    pub = from_env(rank)
    os.environ.pop(signing.ENV_SECRET, None)  # the job's secret is the publisher's: not the script's children's
    if pub is None:
        return None
    node = record.registry.read_session(record.entry["session_id"]) if local_rank == 0 else None
    pub.node = dict(node) if node else None
    record.publisher = pub
    pub.update(record.entry)
    return pub
