"""A torch-free client for torch's TCPStore wire protocol (the c10d store torchrun's agent hosts).

Why not torch's own client: importing torch costs a requester (``rtdebug ps --store``, ``rtdebug stacks
--store``) about a second and a half before the first byte goes out, and a laptop that only wants to
see a job should not need torch at all. The ranks publish through it too: torch's client, imported from a
publisher thread while the main thread imported torch, once aborted a rank, and its failed connects
print C++ retries into the rank's log; this one fails at once, quietly.

Why a rank's dump watcher uses it too: a server-side ``WAIT`` on one key parks the thread in a plain
``recv`` (no polling traffic, no GIL held), and a timeout is a Python exception, not a C++ one that
c10d logs.

The protocol (torch/csrc/distributed/c10d/TCPStore*.cpp, checked against the installed torch by
tests/unit/test_tcpstore.py): the client opens with ``VALIDATE`` and a magic number; every request is one
query-type byte and its arguments; strings and byte values go as a little-endian u64 length and the
bytes; every key carries the client's ``/`` prefix. Every length the server sends is bounded here:
an address may name something that is not a store (or a hostile one).
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterable, Sequence

MAGIC = 0x3C85F7CE
VALIDATE, SET, GET, ADD, CHECK, WAIT, DELETE_KEY, MULTI_GET, MULTI_SET, CANCEL_WAIT, LIST_KEYS = (
    0, 1, 3, 4, 5, 6, 8, 10, 11, 12, 17,
)  # fmt: skip
READY, STOP_WAITING, WAIT_CANCELED = 0, 0, 1
MAX_VALUE = 16 << 20  # one value; a bigger length is not a store talking
MAX_TOTAL = 256 << 20  # one answer (a multi_get, a key list)
MAX_KEYS = 1 << 20
KEY_PREFIX = "/"


class StoreError(OSError):
    """The peer broke the protocol, sent a length beyond the bounds, or closed mid-answer."""


def _str(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return struct.pack("<Q", len(raw)) + raw


def encoded_key(key: str) -> bytes:
    """``key`` as the wire carries it: torch's key prefix, length-prefixed (a request's key field)."""
    return _str(KEY_PREFIX + key)


class TCPStoreClient:
    """One connection to a TCPStore server; the subset of torch's ``TCPStore`` API rtdebug uses."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._budget = 0
        self._deadline = time.monotonic() + timeout
        self.sock.sendall(struct.pack("<BI", VALIDATE, MAGIC))

    # -- wire ---------------------------------------------------------------
    def _recv(self, n: int) -> bytes:
        self._budget += n
        if self._budget > MAX_TOTAL:
            raise StoreError(f"the store's answer exceeds {MAX_TOTAL >> 20} MiB")
        buf = bytearray()
        while len(buf) < n:
            left = self._deadline - time.monotonic()  # for the whole answer: a byte at a time cannot stretch it
            if left <= 0:
                raise StoreError(f"the store's answer took longer than {self.timeout:g} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except TimeoutError:
                raise StoreError(f"the store's answer took longer than {self.timeout:g} s") from None
            if not chunk:
                raise StoreError("the store closed the connection mid-answer")
            buf += chunk
        return bytes(buf)

    def _u64(self) -> int:
        return struct.unpack("<Q", self._recv(8))[0]

    def _bytes(self) -> bytes:
        n = self._u64()
        if n > MAX_VALUE:
            raise StoreError(f"the store sent a value of {n} bytes (more than {MAX_VALUE >> 20} MiB)")
        return self._recv(n)

    def _count(self) -> int:
        n = self._u64()
        if n > MAX_KEYS:
            raise StoreError(f"the store sent a count of {n}")
        return n

    def _ask(self, payload: bytes) -> None:
        self._budget = 0
        self._deadline = time.monotonic() + self.timeout
        self.sock.settimeout(self.timeout)
        self.sock.sendall(payload)

    # -- API ----------------------------------------------------------------
    def set(self, key: str, value: bytes | str) -> None:
        self._ask(bytes([SET]) + encoded_key(key) + _str(value))

    def get(self, key: str) -> bytes:
        """The value, or b"" when the key is absent (the server does not wait, unlike torch's ``get``)."""
        self._ask(bytes([GET]) + encoded_key(key))
        return self._bytes()

    def add(self, key: str, amount: int) -> int:
        self._ask(bytes([ADD]) + encoded_key(key) + struct.pack("<q", amount))
        return struct.unpack("<q", self._recv(8))[0]

    def check(self, keys: Sequence[str]) -> bool:
        self._ask(bytes([CHECK]) + struct.pack("<Q", len(keys)) + b"".join(encoded_key(k) for k in keys))
        return self._recv(1)[0] == READY

    def delete_key(self, key: str) -> bool:
        self._ask(bytes([DELETE_KEY]) + encoded_key(key))
        return struct.unpack("<q", self._recv(8))[0] > 0

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        self._ask(bytes([MULTI_GET]) + struct.pack("<Q", len(keys)) + b"".join(encoded_key(k) for k in keys))
        return [self._bytes() for _ in keys]

    def multi_set(self, keys: Sequence[str], values: Iterable[bytes | str]) -> None:
        pairs = b"".join(encoded_key(k) + _str(v) for k, v in zip(keys, values, strict=True))
        self._ask(bytes([MULTI_SET]) + struct.pack("<Q", len(keys)) + pairs)

    def list_keys(self) -> list[str]:
        self._ask(bytes([LIST_KEYS]))
        keys = [self._bytes().decode(errors="replace") for _ in range(self._count())]
        return [k[len(KEY_PREFIX) :] if k.startswith(KEY_PREFIX) else k for k in keys]

    def wait(self, keys: Sequence[str], timeout: float | None) -> bool:
        """Block until every key exists (True) or ``timeout`` passes (False; the wait is cancelled)."""
        self._ask(bytes([WAIT]) + struct.pack("<Q", len(keys)) + b"".join(encoded_key(k) for k in keys))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                self._deadline = time.monotonic() + self.timeout  # the answer itself, once the wait is over
                return self._wait_answer(self._recv(1)[0]) == STOP_WAITING
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.sock.sendall(bytes([CANCEL_WAIT]))
        self._deadline = time.monotonic() + self.timeout
        got = self._recv(1)[0]
        if got == STOP_WAITING:  # the keys came just before the cancel: its answer follows
            self._wait_answer(self._recv(1)[0], WAIT_CANCELED)
            return True
        self._wait_answer(got, WAIT_CANCELED)
        return False

    @staticmethod
    def _wait_answer(got: int, *want: int) -> int:
        if got not in (want or (STOP_WAITING,)):
            raise StoreError(f"unexpected answer {got} to a wait")
        return got

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> TCPStoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
