"""The torch-free TCPStore client against a real torch TCPStore server (the installed torch's protocol)."""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from rtdebug.registry.tcpstore import StoreError, TCPStoreClient

from support.paths import PY
from support.wait import finishes

# a fake server's thread that fails (a BrokenPipeError when the client hangs up) fails the test it serves
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(scope="module")
def server():
    from torch.distributed import TCPStore

    s = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    yield s


def test_reads_and_writes_what_torch_reads_and_writes(server):
    server.set("t/a", b"from torch")
    with TCPStoreClient("127.0.0.1", server.port) as c:
        assert c.multi_get(["t/a"]) == [b"from torch"]
        c.set("t/b", b"from rtdebug")
        c.multi_set(["t/c", "t/d"], [b"\x00\x01", "two"])
        assert server.get("t/b") == b"from rtdebug" and server.get("t/d") == b"two"
        assert server.multi_get(["t/c"]) == [b"\x00\x01"]
        assert {"t/a", "t/b", "t/c", "t/d"} <= set(c.list_keys())
        assert set(c.list_keys()) == set(server.list_keys())
        assert c.add("t/n", 5) == 5 and server.add("t/n", 2) == 7 and c.add("t/n", 0) == 7
        assert c.check(["t/a", "t/b"]) and not c.check(["t/a", "t/missing"])
        assert c.get("t/missing") == b""
        assert c.delete_key("t/b") and not c.delete_key("t/b")
        assert not server.check(["t/b"])


def test_wait_returns_when_the_key_comes_and_cancels_on_timeout(server):
    with TCPStoreClient("127.0.0.1", server.port) as c:
        # a wait that never sees its key gives up by itself at its timeout, and is cancelled
        assert finishes(lambda: c.wait(["w/never"], 0.3), 60, "a wait for a key that never comes") is False
        # the connection stays usable after a cancelled wait
        assert c.add("w/n", 1) == 1
        # a key set while the client waits ends the wait then, not at its timeout (far past this deadline)
        threading.Timer(0.2, lambda: server.set("w/late", b"1")).start()
        assert finishes(lambda: c.wait(["w/late"], 300), 60, "a wait for a key set meanwhile") is True
        assert c.wait(["w/late"], 0) is True  # present already


def test_the_client_module_does_not_import_torch():
    code = "import sys, rtdebug.registry.tcpstore, rtdebug.views.store; print('torch' in sys.modules)"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _drain(conn: socket.socket) -> None:
    """Read the client's hello and request (they may come apart): closing on unread bytes would reset."""
    conn.settimeout(0.2)
    try:
        while conn.recv(100):
            pass
    except TimeoutError:
        pass


@contextlib.contextmanager
def _fake_store(answer: bytes, byte_gap: float = 0.0) -> Iterator[int]:
    """The port of a server that answers anything with ``answer`` (with ``byte_gap``: one byte at a time).

    The client may hang up before the whole answer is sent (that is what a bounded client does): the server
    stops there. Leaving, it waits for its thread, so nothing of it runs on into the next test."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(60)  # the test connects at once; a test that fails before it does ends the thread too

    def serve() -> None:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            return
        _drain(conn)
        with conn:
            try:
                for chunk in [answer[i : i + 1] for i in range(len(answer))] if byte_gap else [answer]:
                    time.sleep(byte_gap)  # part of the fake: a server that answers slowly
                    conn.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up and hung up: the end of this fake's conversation
            time.sleep(0.5)  # part of the fake: it closes a moment after its answer, not with it

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with srv:
        yield srv.getsockname()[1]
        thread.join()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (struct.pack("<Q", 1 << 40), "the store sent a count of 1099511627776"),
        (struct.pack("<QQ", 1, 1 << 30), "the store sent a value of 1073741824 bytes (more than 16 MiB)"),
        (struct.pack("<QQ", 1, 100) + b"abc", "the store closed the connection mid-answer"),
    ],
)
def test_a_hostile_server_gets_one_bounded_error(answer, error):
    with _fake_store(answer) as port, pytest.raises(StoreError) as exc:
        with TCPStoreClient("127.0.0.1", port) as c:
            c.list_keys()
    assert str(exc.value) == error


def test_a_store_that_answers_a_byte_at_a_time_is_bounded_for_the_whole_answer():
    """Each byte inside the socket timeout, the whole answer far beyond it: the client gives up once
    the answer as a whole has taken ``timeout``, not after each silent gap."""
    # each gap (0.3 s) is inside the 1 s timeout, so a per-gap bound never fires: only one for the whole
    # answer gives this error (a per-gap one reads on until the fake closes: "closed the connection mid-answer")
    with _fake_store(struct.pack("<Q", 1), byte_gap=0.3) as port, pytest.raises(OSError) as exc:
        with TCPStoreClient("127.0.0.1", port, timeout=1.0) as c:
            finishes(c.list_keys, 60, "list_keys from a store that answers a byte at a time")
    assert "took longer than 1 s" in str(exc.value)
