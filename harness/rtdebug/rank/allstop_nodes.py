"""All-stop across nodes: each rank's all-stop board (``rtdebug.rank.allstop``) carried through the job's store.

The board is one machine's file; the ranks of a multi-node torchrun job (and an adopted multi-node job) already
reach the job's c10d store (``rtdebug.rank.publish``). This module runs in every rank that has a store and a
job secret, in two hidden threads (pydevd never suspends them):

- **the writer**: a change this rank makes to the board (``Board.on_publish``: it stopped, or it continued) is
  handed to a thread of its own, which takes the next number ``g`` of the store's counter
  ``rtdebug/<run>/allstop/seq`` and writes the change, signed, at ``rtdebug/<run>/allstop/<g>``. The rank's
  own thread never waits on the network.
- **the watcher**: parked in a server-side ``WAIT`` on the next number's key (as ``rtdebug.rank.stacks.watch``:
  no traffic, no GIL, while nothing happens); woken, it reads the counter and the newest change and, if another
  node wrote it, applies it to this node's board (``Board.apply``: the local ranks are woken, nothing is
  written back to the store, so there is no echo).

Why every rank watches, and how N ranks do not each apply the same change: any rank may exit, be detached or
never be adopted, so none is *the* bridge; the ranks of a node share a small file in the session directory
(``allstop-nodes.bin``, under ``flock``) holding the newest store number the node has seen. A change is applied
only by the rank that moves that number forward, so it is applied once per node, and a change older than one
already seen (a stop from node B reaching node A after A's continue, which came later in the store's order) is
never applied: the store's counter is the job's order. A rank's own change is entered there before it is
written to the store, and if an older change from elsewhere landed on the board between this rank's change and
its number, the rank's change is put back on the board.

A stop from another node whose rank dies must not hold this node for ever (``Board.setter_gone`` cannot check a
process elsewhere): while the board holds such a stop, the watcher's wait is bounded (``LIVE_S``) and it reads
the stopping rank's entry in the store (its heartbeat ``tick``, ``rtdebug.rank.publish``): an entry that says
the rank ended, or whose tick has not moved for ``LOST_S`` on this machine's clock, lets this node's ranks go
(and tells the store, so every node does).

Trust: anyone who reaches the store can write it. A change is ``rtas1 <mac>\\n<body>``, the MAC an HMAC-SHA256
with the job's secret over the key and the body's bytes: a value longer than ``MAX_VALUE`` is refused from its
length (never read: ``WatchClient.get_small``), a short one is parsed only after its MAC matched, and a
change signed for one number cannot be moved to another. A key planted ahead of the counter is deleted unread.
With no job secret nothing is started (a forged stop would pause the job): all-stop stays each node's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.common import log
from rtdebug.common.threads import hidden_thread
from rtdebug.rank.allstop import BY, RUNNING, STOPPED, AllStop, Board
from rtdebug.rank.stacks.watch import WatchClient
from rtdebug.registry import signing
from rtdebug.registry.c10d import HEARTBEAT_S, LOST_ROUNDS, PREFIX, rank_key
from rtdebug.registry.entry import LIVE_RANK_STATES

FILE = "allstop-nodes.bin"
MAGIC = b"rtas1 "
MAX_VALUE = 512  # bytes: a genuine change is ~140
MAX_ENTRY = 64 << 10  # a rank's entry in the store, read while a remote stop holds this node
MAX_NODE = 128
WAIT_S = 30.0  # a bounded wait, then the counter is read again (a number taken by a writer that died)
LIVE_S = HEARTBEAT_S  # while a remote stop holds this node: how often its rank's entry is read
LOST_S = LOST_ROUNDS * HEARTBEAT_S  # a remote stopping rank whose heartbeat has not moved this long is gone
MIN_GAP_S = 0.05  # at most one refused value per this long (junk written at every number costs a check each)
_DOMAIN = b"rtdebug-allstop-v1\0"
_LAST = struct.Struct("<Q")


def seq_key(run_id: str) -> str:
    return f"{PREFIX}/{run_id}/allstop/seq"


def change_key(run_id: str, g: int) -> str:
    return f"{PREFIX}/{run_id}/allstop/{g}"


@dataclass(frozen=True)
class Change:
    """One change of the job's all-stop, as the store carries it: number ``g`` of the store's counter, the mode
    (``allstop.RUNNING`` / ``STOPPED``), the rank that set it, the node (its session id) it came from, and
    whether the stop is a step's."""

    g: int
    mode: int
    by: int
    node: str
    step: bool = False  # a step's stop (the board's ``KIND``): it pauses no rank stepping itself


def _mac(key: str, body: bytes, secret: str) -> bytes:
    return hmac.new(secret.encode(), _DOMAIN + key.encode() + b"\0" + body, hashlib.sha256).hexdigest().encode()


def signed(key: str, body: bytes, secret: str) -> bytes:
    """``body`` as a value at store key ``key``, with its MAC."""
    return MAGIC + _mac(key, body, secret) + b"\n" + body


def encode(key: str, change: Change, secret: str) -> bytes:
    """The signed value of ``change`` at store key ``key``."""
    body = {"g": change.g, "mode": change.mode, "by": change.by, "node": change.node, "step": change.step}
    return signed(key, json.dumps(body, separators=(",", ":")).encode(), secret)


def decode(key: str, raw: bytes | None, secret: str, g: int) -> Change | None:
    """The change number ``g`` at ``key``, or None (absent, too long, not signed with ``secret``, malformed).
    Size, then MAC, then parse: nothing of an unsigned value is parsed."""
    if not raw or len(raw) > MAX_VALUE or not raw.startswith(MAGIC):
        return None
    head, sep, body = raw.partition(b"\n")
    if not sep or not hmac.compare_digest(head[len(MAGIC) :], _mac(key, body, secret)):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    mode, by, node, step = value.get("mode"), value.get("by"), value.get("node"), value.get("step", False)
    if value.get("g") != g or mode not in (RUNNING, STOPPED) or isinstance(mode, bool):
        return None
    if not isinstance(by, int) or isinstance(by, bool) or not 0 <= by < 1 << 31:
        return None
    if not isinstance(node, str) or not 0 < len(node) <= MAX_NODE or not isinstance(step, bool):
        return None
    return Change(g, mode, by, node, step)


class Seen:
    """The node's newest store number (``allstop-nodes.bin``, 0600 in the session directory), shared by its
    ranks under ``flock``: what makes one rank per node apply a change, and an older change lose."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._lock = threading.Lock()  # flock excludes the other ranks, not this rank's other thread

    @contextmanager
    def locked(self) -> Iterator[list[int]]:
        """``[newest]``, under the node's lock; what the block leaves in it is written back."""
        with self._lock:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self.fd, _LAST.size, 0)
                box = [int(_LAST.unpack(raw)[0]) if len(raw) == _LAST.size else 0]
                before = box[0]
                yield box
                if box[0] != before:
                    os.pwrite(self.fd, _LAST.pack(box[0]), 0)
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def board_pid(board: Board) -> int:
    """The process that last set ``board`` (0: a change applied from another node)."""
    return int(BY.unpack_from(board.mm, 12)[1])


def _hang_up(client: Any) -> None:
    try:
        client.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    client.close()


class Bridge:
    """One rank's bridge between its node's board and the job's store (the writer and the watcher)."""

    def __init__(self, part: AllStop, host: str, port: int, run_id: str, secret: str, node: str, seen: Seen) -> None:
        self.part, self.board, self.rank = part, part.board, part.rank
        self.host, self.port, self.run_id, self.secret, self.node = host, port, run_id, secret, node
        self.seen = seen
        self.last: int | None = None  # the newest store number this rank's watcher has read
        self._cv = threading.Condition()
        self._outbox: tuple[int, int, bool] | None = None  # this rank's newest change not yet in the store
        self._writer: threading.Thread | None = None
        self._busy = False  # the writer is sending a change
        self._closed = False
        self._clients: list[Any] = []
        self._prev: str | None = None  # this rank's previous change key: deleted when it writes the next
        self._at = -MIN_GAP_S
        self.watched: tuple[int, int, Any] | None = None  # (rank, board gen, its tick): the remote stop held
        self._watched_since = 0.0
        self.applied = 0  # changes from other nodes this rank applied (tests, diagnostics)
        self.watcher = hidden_thread(self._watch, f"rtdebug-allstop-nodes-{self.rank}", start=False)

    def start(self) -> Bridge:
        self.board.on_publish.append(self.on_publish)
        self.watcher.start()
        return self

    def close(self, flush_s: float = 2.0) -> None:
        """End both threads (a wait in progress ends with its connection) and unhook from the board; a change
        not yet in the store is given ``flush_s`` to get there (a detached rank's end of its own stop)."""
        deadline = time.monotonic() + flush_s
        with self._cv:
            while (self._outbox is not None or self._busy) and self._writer is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            self._closed = True
            self._cv.notify_all()
        try:
            self.board.on_publish.remove(self.on_publish)
        except ValueError:
            pass
        for c in list(self._clients):
            _hang_up(c)  # a shutdown wakes the thread parked in select() on it; a bare close would not
        threads = [t for t in (self.watcher, self._writer) if t is not None and t.ident is not None]
        for t in threads:
            if t is not threading.current_thread():
                t.join(3.0)
        if not any(t.is_alive() for t in threads):  # else its descriptor stays: a reused number must not be locked
            self.seen.close()

    def _connect(self) -> WatchClient:
        client = WatchClient(self.host, self.port, timeout=10.0)
        self._clients.append(client)
        if self._closed:
            _hang_up(client)
        return client

    def _drop(self, client: Any) -> None:
        if client is not None:
            client.close()
            if client in self._clients:
                self._clients.remove(client)

    def _sleep(self, s: float) -> None:
        with self._cv:
            if not self._closed:
                self._cv.wait(s)

    # -- the writer: this rank's changes into the store -----------------------------------------------------
    def on_publish(self, mode: int, by: int, step: bool = False) -> None:
        """``Board.on_publish``: in the rank's thread that changed the board, just after; hands it to the writer
        (``step``: the stop is a step's)."""
        step = step and mode == STOPPED
        with self._cv:
            self._outbox = (mode, by, step)
            self._cv.notify_all()
            if self._writer is None and not self._closed:
                self._writer = hidden_thread(self._write_loop, f"rtdebug-allstop-send-{self.rank}")

    def _write_loop(self) -> None:
        client, delay = None, 0.2
        while True:
            with self._cv:
                while self._outbox is None and not self._closed:
                    self._cv.wait()
                if self._closed:
                    self._drop(client)
                    return
                mode, by, step = self._outbox  # type: ignore[misc]
                self._outbox, self._busy = None, True
            try:
                if client is None:
                    client = self._connect()
                self.send(client, mode, by, step)
                delay = 0.2
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
            except Exception:  # the store is gone (the job ends), or not reachable: retry the newest change
                log.swallowed("rank.allstop_nodes: a change could not reach the store: retry")
                self._drop(client)
                client = None
                with self._cv:
                    self._busy = False
                    if self._outbox is None:
                        self._outbox = (mode, by, step)
                    self._cv.notify_all()
                self._sleep(delay)
                delay = min(delay * 2, 5.0)

    def send(self, client: Any, mode: int, by: int, step: bool = False) -> int:
        """Write this rank's change as the store's next number; its number."""
        g = int(client.add(seq_key(self.run_id), 1))
        with self.seen.locked() as box:  # entered before any node can read it: a local watcher never applies it
            if g > box[0]:
                box[0] = g
                try:
                    if board_pid(self.board) == 0:  # an older change from elsewhere landed after ours: ours wins
                        self.board.apply(mode, by, os.getpid(), step)
                except ValueError:  # the board was closed (an adopted rank's detach)
                    pass
        key = change_key(self.run_id, g)
        client.set(key, encode(key, Change(g, mode, by, self.node, step), self.secret))
        if self._prev is not None:
            client.delete_key(self._prev)  # one change per rank in the store; never the newest
        self._prev = key
        return g

    # -- the watcher: other nodes' changes onto this node's board -------------------------------------------
    def _watch(self) -> None:
        client, delay = None, 0.5
        while not self._closed:
            try:
                client = self._connect()
                if self.last is None:
                    self.last = int(client.add(seq_key(self.run_id), 0))  # what came before this rank is past
                delay = 0.5
                self._serve(client)
            except Exception:  # the store is not up yet, gone with the job, or sent an oversized value
                log.swallowed("rank.allstop_nodes: the store is not up yet, gone, or sent junk: reconnect")
                self._drop(client)
                client = None
                self._sleep(delay)
                delay = min(delay * 2, 10.0)

    def _serve(self, client: Any) -> None:
        while not self._closed:
            assert self.last is not None
            held = self._held()
            n = self.last + 1
            got = client.wait([change_key(self.run_id, n)], LIVE_S if held else WAIT_S)
            newest = int(client.add(seq_key(self.run_id), 0))
            if got and newest < n:  # written ahead of the counter: no genuine writer did; gone unread
                self._pace()
                client.delete_key(change_key(self.run_id, n))
            elif newest > self.last:
                self._take(client, newest)
            if held is not None:
                self._check_stopper(client, *held)

    def _pace(self) -> None:
        time.sleep(max(0.0, MIN_GAP_S - (time.monotonic() - self._at)))
        self._at = time.monotonic()

    def _take(self, client: Any, newest: int) -> None:
        """Read the newest change (a writer may have its number and not have written it yet) and apply it."""
        self.last = newest  # first: a value that ends the connection is not read again
        key = change_key(self.run_id, newest)
        change = None
        for _ in range(3):  # absent for a moment; or junk written there between the writer's number and its value
            change = decode(key, client.get_small(key, MAX_VALUE), self.secret, newest)
            if change is not None or self._closed:
                break
            self._pace()
            if not client.check([key]):
                client.wait([key], 1.0)
        if change is not None:
            self.apply(change)

    def apply(self, change: Change) -> bool:
        """Put another node's change on this node's board, once per node and only if no newer one was seen."""
        with self.seen.locked() as box:
            if change.g <= box[0]:
                return False
            box[0] = change.g
            if change.node == self.node:  # this node's own (its writer entered it already: not reached)
                return False
            try:
                self.board.apply(change.mode, change.by, 0, change.step)
            except ValueError:  # the board was closed (an adopted rank's detach)
                return False
        self.applied += 1
        return True

    # -- a remote stop whose rank is gone -------------------------------------------------------------------
    def _held(self) -> tuple[int, int] | None:
        """(its rank, the board's generation) while the board holds a stop applied from another node."""
        try:
            gen, mode, by = self.board.read()
            return (by, gen) if mode == STOPPED and board_pid(self.board) == 0 else None
        except ValueError:
            return None

    def _check_stopper(self, client: Any, by: int, gen: int) -> None:
        if not self.stopper_gone(client, by, gen):
            return
        with self.seen.locked():
            if self._held() != (by, gen):
                return  # continued meanwhile, or another rank of this node let go already
            print(
                f"rtdebug: rank {self.rank}: rank {by} (another node), whose stop holds this node, has ended or not"
                f" been heard from for ~{LOST_S:.0f}s; all-stop lets go",
                file=sys.stderr,
                flush=True,
            )
            self.board.publish(RUNNING, by)  # every rank here goes on; the writer tells the other nodes

    def stopper_gone(self, client: Any, by: int, gen: int) -> bool:
        """Whether rank ``by`` (another node's, whose stop the board holds at generation ``gen``) is gone: its
        signed entry in the store says it ended, or its heartbeat tick has not moved for ``LOST_S``."""
        raw = client.get_small(rank_key(self.run_id, by), MAX_ENTRY)
        entry: Any = None
        try:
            entry = json.loads(raw) if raw else None
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or not signing.verify(rank_key(self.run_id, by), entry, [self.secret]):
            entry = None  # junk anyone wrote says nothing; no entry at all counts as a tick that does not move
        if entry is not None and entry.get("state") not in LIVE_RANK_STATES:
            return True
        now = time.monotonic()
        mark = (by, gen, entry.get("tick") if entry is not None else None)
        if mark != self.watched:
            self.watched, self._watched_since = mark, now
            return False
        return now - self._watched_since > LOST_S


_current: Bridge | None = None


def arm(part: AllStop | None, publisher: Any, session_dir: Path | str, node: str) -> Bridge | None:
    """Carry this rank's all-stop (``part``, from ``allstop.arm``) across nodes through the store its
    ``publisher`` (``rtdebug.rank.publish.Publisher``) writes to; ``node``: this node's session id. None, and
    nothing started, without all-stop, a store or a job secret."""
    global _current
    secret = getattr(publisher, "secret", None)
    if part is None or publisher is None or not secret:
        return None
    try:
        seen = Seen(Path(session_dir) / FILE)
    except OSError as exc:
        print(f"rtdebug: rank {part.rank}: all-stop reaches this node only ({FILE}: {exc})", file=sys.stderr)
        return None
    close()
    _current = Bridge(part, publisher.host, int(publisher.port), publisher.run_id, secret, node, seen).start()
    return _current


def close() -> None:
    """Undo ``arm`` (an adopted rank's detach): both threads ended, their connections closed, the hook gone."""
    global _current
    bridge, _current = _current, None
    if bridge is not None:
        bridge.close()
