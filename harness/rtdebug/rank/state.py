"""A rank's registry entry and its state machine: one object for torchrun ranks, ``rtdebug run`` and Ray workers.

States: ``starting`` -> ``ready`` <-> ``attached`` -> ``exited`` | ``failed`` | ``detached`` (an adopted rank
that rtdebug has left: it runs on, without rtdebug, ``rtdebug.rank.adopted``). The endpoint reports
clients coming and going (``ready``/``attached``) through ``connect``; the rank's own ending
(``exited``/``failed``) is final: a post-mortem client that attaches to a failed rank and leaves
again changes its attach count, never its state back to ``ready``. Every transition is written
where the rank is registered (this machine's files, or the Ray KV) and, in a multi-node job, also
published to the job's store (``publisher``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Protocol

from rtdebug.common.procinfo import process_create_time
from rtdebug.registry.entry import SCHEMA_VERSION, RankWriter
from rtdebug.registry.schema import RankEntry

FINAL = ("exited", "failed", "detached")


class EndpointLike(Protocol):
    """What the record reads from and wires into a rank's endpoint (``rtdebug.rank.endpoint.Endpoint``)."""

    label: str
    attach_count: int
    refused_count: int
    on_state: Any
    on_refused: Any

    @property
    def lazy(self) -> bool: ...


class EntrySink(Protocol):
    """Where a multi-node rank's entry also goes (``rtdebug.rank.publish.Publisher``: the job's store)."""

    def update(self, entry: dict[str, Any], final: bool = False) -> None: ...


class RankState:
    """This rank's registry entry, kept current as its state changes."""

    publisher: EntrySink | None = None  # a multi-node job's: the entry also goes to its store

    def __init__(
        self,
        registry: RankWriter,
        session_id: str,
        rank: int,
        host: str,
        port: int,
        wait: bool,
        script: str,
        local_rank: int = 0,
        node_rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.registry = registry
        self._lock = threading.RLock()  # the endpoint's threads and the rank's main thread both move the state
        now = time.time()
        pid = os.getpid()
        entry: RankEntry = {
            "schema_version": SCHEMA_VERSION,
            "kind": "rank",
            "session_id": session_id,
            "rank": rank,
            "local_rank": local_rank,
            "node_rank": node_rank,
            "world_size": world_size,
            "host": host,
            "port": port,
            "pid": pid,
            "create_time": process_create_time(pid) or now,
            "state": "starting",
            "lazy": True,
            "wait": wait,
            "attach_count": 0,
            "script": script,
            "cwd": os.getcwd(),
            "started_at": now,
            "updated_at": now,
            "exit_code": None,
            "error": None,
            "refused_count": 0,
        }
        self.entry: dict[str, Any] = dict(entry)  # a plain dict: ``set`` adds any of the entry's fields
        registry.write_rank(self.entry)

    @property
    def state(self) -> str:
        return str(self.entry["state"])

    def set(self, **fields: Any) -> None:
        """Record ``fields`` everywhere this rank is registered (never raises for a vanished session dir)."""
        with self._lock:
            self.entry.update(fields, updated_at=time.time())
            try:
                self.registry.write_rank(self.entry)
            except OSError:
                pass  # the registry is gone (the session was stopped): nothing left to record
            entry = dict(self.entry)
        if self.publisher is not None:
            self.publisher.update(entry, final=fields.get("state") in FINAL)

    # -- transitions --------------------------------------------------------------------
    def client(self, state: str, endpoint: EndpointLike) -> None:
        """A client came (``attached``) or the last one left (``ready``); a rank that ended stays ended."""
        with self._lock:
            if self.state in FINAL:
                state = self.state
            self.set(state=state, lazy=endpoint.lazy, attach_count=endpoint.attach_count)

    def ready(self, endpoint: EndpointLike | None = None, **fields: Any) -> None:
        """The endpoint is up. Only a ``starting`` rank becomes ``ready``: a client may have attached already."""
        with self._lock:
            if endpoint is not None:
                fields["lazy"] = endpoint.lazy
            self.set(**({"state": "ready"} if self.state == "starting" else {}), **fields)

    def stopped(self, code: int) -> None:
        """The user stopped the script (Ctrl-C): it ended, it did not fail."""
        self.set(state="exited", exit_code=code)

    def exited(self, code: int) -> None:
        """The script returned (or called ``sys.exit``): ``exited`` for 0, else ``failed``."""
        self.set(state="exited" if code == 0 else "failed", exit_code=code)

    def failed(self, error: str, exit_code: int | None = 1) -> None:
        self.set(state="failed", exit_code=exit_code, error=error)

    def connect(self, endpoint: EndpointLike) -> None:
        """Let ``endpoint`` report clients and refusals through this record (the one wiring every rank uses)."""
        endpoint.label = f"rank {self.entry['rank']}"
        endpoint.on_state = lambda state: self.client(state, endpoint)
        endpoint.on_refused = lambda: self.set(refused_count=endpoint.refused_count)
