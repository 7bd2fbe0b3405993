"""All-stop in Ray Train workers on a cluster (``num_workers > 0``, ``rtdebug.rank.ray_worker``).

A Ray worker has no session directory and its peers may be on other machines, so each worker is its own
"node" of all-stop (``rtdebug.rank.allstop``, ``rtdebug.rank.allstop_nodes``):

- **its board** is a private file: ``allstop.bin`` in a 0700 temp directory of the worker's own (``mkdtemp``),
  removed as soon as the file is mapped (the mapping is all the worker needs: no name is left on disk, even
  by a worker Ray kills). It is armed with the endpoint, in ``after_init_train_context`` (Ray's actor
  thread), so a client that attaches at once is seen;
- **the boards are joined** by the same ``Bridge`` a multi-node torchrun job uses, through a store every
  worker reaches: the TCPStore of the torch process group Ray's ``TorchConfig`` set up (its host and port read
  from ``distributed_c10d._get_default_store()``, else ``MASTER_ADDR`` / ``MASTER_PORT``), signed with the
  driver session's secret the pickled callback carries. ``join`` runs when the train function is launched
  (``run_train_fn``, after Ray's backend set the group up); the bridge's own file (``allstop-nodes.bin``) is
  made the same way, in a temp directory removed once it is open. Each worker also keeps its entry, with a
  heartbeat, in that store (``rtdebug.rank.publish.Publisher``, under the run's session id): a stopped
  worker that dies lets its peers go in ~10 s, as across torchrun's nodes.

The train function runs in Ray's training thread, not the main thread (where the actor answers Ray's health
checks), so the hold of a rank with no client when back from C++ (``rtdebug.rank.nativehold``, a pending
call the main thread runs) is taken out: a worker with no client is held before its next Python-level
collective only; a worker with a client is paused by pydevd (``AllStop``'s watcher), its actor thread left
running (``pydev_do_not_trace``). The job's setting (``--no-all-stop``, ``--no-continue-all``) comes from
the driver's environment, in the callback. No store or no secret: each worker keeps its debug state, alone.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.common import log
from rtdebug.common.config import ALL_STOP_VAR, CONTINUE_ALL_VAR
from rtdebug.rank import allstop, allstop_nodes, runtime
from rtdebug.rank.collectives import recorder
from rtdebug.rank.publish import Publisher

SETTING_VARS = (ALL_STOP_VAR, CONTINUE_ALL_VAR)
DIR_PREFIX = "rtdebug-allstop-"  # + the worker's pid: its temp directories, each gone once its file is open


def setting(env: Mapping[str, str]) -> dict[str, str]:
    """The job's all-stop setting from the driver's environment (``env``): what ``arm`` is given."""
    return {k: env[k] for k in SETTING_VARS if k in env}


@dataclass
class RayAllStop:
    """One worker's all-stop: its part and (once joined) its publisher."""

    part: allstop.AllStop
    publisher: Publisher | None = None

    def join(self, run_id: str, secret: str | None, record: Any) -> bool:
        """Join the other workers' boards through the process group's store (in the actor's thread, at
        ``run_train_fn``); False, and all-stop stays this worker's own, without a store or a secret."""
        where = store_address()
        if where is None or not secret:
            return False
        pub = Publisher(where[0], where[1], run_id, self.part.rank, secret=secret)
        record.publisher, self.publisher = pub, pub
        pub.update(record.entry)
        node = f"{run_id}-w{self.part.rank}"  # each worker is its own node: its board is its own
        try:
            seen_dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
        except OSError as exc:
            print(f"rtdebug: rank {self.part.rank}: all-stop reaches this worker only ({exc})", file=sys.stderr)
            return False
        try:
            return allstop_nodes.arm(self.part, pub, seen_dir, node) is not None
        finally:
            shutil.rmtree(seen_dir, ignore_errors=True)  # its file stays open in the bridge

    def close(self) -> None:
        """At the worker's end: the part undone (a stop of its own ended for its peers), the bridge closed."""
        if runtime.allstop is self.part:
            runtime.allstop = None
        self.part.close(recorder.hold_with)
        allstop_nodes.close()  # after: the end of this worker's own stop reaches the others first


def arm(rank: int, endpoint: Any, record: Any, env: Mapping[str, str]) -> RayAllStop | None:
    """This worker's all-stop on a private board (in the actor's thread, with its endpoint); ``env``: the
    job's setting (``setting``). None where the board cannot be made (the worker keeps its debug state)."""
    try:
        board_dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))  # 0700, this worker's own
    except OSError as exc:
        print(f"rtdebug: rank {rank}: all-stop is off in this worker ({exc})", file=sys.stderr, flush=True)
        return None
    try:
        # no hold when back from C++: its pending call would run in the actor's main thread, never in the
        # training thread
        part = allstop.arm(board_dir, rank, endpoint, record, recorder.hold_with, env=env, native=False)
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)  # the board stays mapped: no name is needed any more
    if part is None:
        return None
    runtime.allstop = part  # rtdebug.rank.api.all_stop (the extension's setting) reaches it
    return RayAllStop(part)


def store_address() -> tuple[str, int] | None:
    """Host and port of the TCPStore of this worker's default process group (Ray's ``TorchConfig``), or None."""
    try:
        from torch.distributed import distributed_c10d as c10d

        if c10d.is_initialized():
            store: Any = c10d._get_default_store()
            while hasattr(store, "underlying_store"):  # PrefixStore(s) around the TCPStore
                store = store.underlying_store
            host, port = getattr(store, "host", None), getattr(store, "port", None)
            if host and port:
                return str(host), int(port)
    except Exception:  # no torch, no group, another kind of store
        log.swallowed("rank.ray_allstop: no TCPStore of the process group: the environment's, or none")
    addr, port_s = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    return (addr, int(port_s)) if addr and port_s.isdigit() else None
