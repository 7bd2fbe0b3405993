"""Rank side of job-wide ``stacks``: a hidden thread answers dump requests from the job's store.

Why a thread that waits in the store, not a signal or a poll: a requester on another machine can
reach the store, not the rank's process; and a server-side ``WAIT`` on the next request's key parks
the thread in a ``recv`` without the GIL, so a 1024-rank job costs the store one idle connection per
rank and no traffic until someone asks (a bounded wait re-reads the counter now and then, in case a
requester took a number and died before writing its request). The dump is taken by this thread, as
Python with the GIL (``rtdebug.rank.stacks.take.with_flight``), while the main thread runs, sits at a breakpoint
or blocks in a C++ collective; it is the same text a local ``rtdebug stacks`` parses.

Anyone who reaches the store can write the key a rank waits on, so a request costs the rank almost
nothing until it is known genuine: checks come at most every ``MIN_GAP_S``; a value longer than
``wire.MAX_REQUEST`` is refused from its length alone (the connection is dropped before the value is
read: its bytes never reach Python, and the small receive buffer bounds what the store sends before the
reset); a short one is parsed only after its MAC matched (``rtdebug.stacks.wire.request_ok``).

Torchrun ranks wait through the torch-free TCPStore client (``rtdebug.registry.tcpstore``); Ray
workers have no blocking wait in the GCS KV, so they poll one key, slowly (``KVWatch``).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from rtdebug.common import log
from rtdebug.common.threads import hidden_thread
from rtdebug.rank.stacks import take as taker
from rtdebug.registry.tcpstore import GET, StoreError, TCPStoreClient, encoded_key
from rtdebug.stacks import wire

WAIT_S = 30.0  # a bounded wait, then re-read the request counter
MIN_GAP_S = 0.2  # at most one request checked per this long, however many come (genuine or not)
RCVBUF = 16 << 10  # what the store can push at a rank before a refused value's reset stops it


def collective() -> dict[str, Any]:
    """``{"collective": the record or None before the first}``, or ``{}`` when this rank keeps no record
    (off, or unreadable): the requester then gives no verdict, as for a local rank without one."""
    from rtdebug.rank.collectives import (
        recorder as collrec,  # here: a Ray worker's thread starts before the record is armed
    )

    try:
        return {"collective": collrec.snapshot()} if collrec.recording() else {}
    except Exception:
        log.swallowed("rank.stacks.watch: collective: going on")
        return {}


class Oversized(StoreError):
    """A value longer than the caller takes: the connection is closed unread (reconnect to go on)."""


class WatchClient(TCPStoreClient):
    """The rank's store client: a small receive buffer, and a ``get`` that reads only a small value."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        super().__init__(host, port, timeout)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # after the SYN: ~70 KB get through

    def get_small(self, key: str, limit: int) -> bytes:
        """The value (b"" when absent); ``Oversized`` from its length alone when it is longer than ``limit``."""
        self._ask(bytes([GET]) + encoded_key(key))
        n = self._u64()
        if n > limit:
            self.close()  # unread: the rest is reset, never copied
            raise Oversized(f"a {n}-byte value at {key}")
        return self._recv(n)


class StoreWatch:
    """Answers ``rtdebug/<run>/dump/<n>`` requests in a torchrun job's c10d store."""

    def __init__(self, host: str, port: int, run_id: str, rank: int, secret: str | None, where: dict[str, Any]) -> None:
        self.host, self.port, self.run_id, self.rank, self.secret = host, port, run_id, rank, secret
        self.where = where  # hostname, node_ip: shown next to the rank
        self.last_n = 0
        self._last_answer: str | None = None
        self._at = -MIN_GAP_S  # monotonic time of the last check
        self._closed = False
        self._client: Any = None
        self.thread = hidden_thread(self._loop, f"rtdebug-dumpwatch-{rank}", start=False)

    def start(self) -> StoreWatch:
        self.thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        client = self._client
        if client is not None:
            client.close()  # ends a wait in progress

    def _loop(self) -> None:
        delay = 0.5
        while not self._closed:
            try:
                self._client = WatchClient(self.host, self.port, timeout=10.0)
                self.last_n = max(self.last_n, self._client.add(wire.dump_seq_key(self.run_id), 0))
                delay = 0.5
                self._serve(self._client)
            except Exception:  # the store is not up yet, gone with the job, or sent an oversized request
                log.swallowed(
                    "rank.stacks.watch: the store is not up yet, gone with the job, or sent an oversized request"
                )
                if self._client is not None:
                    self._client.close()
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _serve(self, client: Any) -> None:
        while not self._closed:
            n = self.last_n + 1
            got = client.wait([wire.dump_key(self.run_id, n)], WAIT_S)
            newest = client.add(wire.dump_seq_key(self.run_id), 0)
            if got:
                self.handle(client, n)  # a forged request n is passed over, not waited on again
            if newest > self.last_n + 1 or (not got and newest >= n):
                # requests queued meanwhile: only the newest is answered; one that was numbered but
                # never written (its requester died) is given up after one bounded wait
                self.last_n = max(self.last_n, newest - 1)

    def _pace(self) -> None:
        """The rate limit, before anything of a request is read: junk at every number costs a check per gap."""
        time.sleep(max(0.0, MIN_GAP_S - (time.monotonic() - self._at)))
        self._at = time.monotonic()

    def handle(self, client: WatchClient, n: int) -> None:
        self.last_n = max(self.last_n, n)  # first: junk that ends the connection is not read again
        self._pace()
        key = wire.dump_key(self.run_id, n)
        got = wire.request_ok(key, client.get_small(key, wire.MAX_REQUEST), self.secret)
        if got is None or got[0] != n:
            return
        nonce = got[1]
        out = wire.answer_key(self.run_id, n, nonce, self.rank)
        value = wire.answer(out, self.rank, n, nonce, taker.with_flight(), self.secret, **collective(), **self.where)
        client.set(out, value)
        if self._last_answer is not None:
            client.delete_key(self._last_answer)  # one answer per rank in the store, at most
        self._last_answer = out
        done = wire.dump_done_key(self.run_id, n, nonce)
        client.add(done, 1)
        if not client.check([key]):  # the requester gave up: it deletes the request, then the count, so a
            client.delete_key(done)  # count made after that is this rank's to delete (none is left behind)


class KVWatch:
    """Answers a Ray run's dump request (``ray_kv.dump_request_key``) in the GCS KV (polled: the KV cannot block)."""

    POLL_S = 0.5

    def __init__(self, kv: Any, sid: str, rank: int, secret: str | None, where: dict[str, Any]) -> None:
        self.kv, self.sid, self.rank, self.secret, self.where = kv, sid, rank, secret, where
        self.main_ident: int | None = None  # the training thread, once known (Ray runs the train fn in one)
        self.last_n = 0
        self._closed = False
        self.thread = hidden_thread(self._loop, f"rtdebug-dumpwatch-{rank}", start=False)

    def start(self) -> KVWatch:
        self.thread.start()
        return self

    def close(self) -> None:
        self._closed = True

    def _loop(self) -> None:
        from rtdebug.stacks.wire import dump_answer_key, dump_request_key

        key = dump_request_key(self.sid)
        while not self._closed:
            time.sleep(self.POLL_S)
            try:  # the poll is the rate limit; the size, then the MAC, are checked before any parse
                got = wire.request_ok(key, self.kv.get_raw(key), self.secret)
                if got is None or got[0] <= self.last_n:  # junk, forged, or answered already (a replay)
                    continue
                n, nonce = got
                self.last_n = n
                out = dump_answer_key(self.sid, self.rank)
                dump = taker.with_flight(self.main_ident)
                value = wire.answer(out, self.rank, n, nonce, dump, self.secret, **collective(), **self.where)
                self.kv.put_raw(out, value)
            except Exception:  # the cluster is going away with the run
                log.swallowed("rank.stacks.watch: the cluster is going away with the run")
                continue
