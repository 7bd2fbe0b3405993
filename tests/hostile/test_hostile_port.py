"""Hostile bytes and floods against a rank's debug port (issue 19): the port admits DAP only, refusals are cheap.

* the first-message parser (``rtdebug.rank.endpoint.dapgate``): exact reasons for each kind of non-DAP opening;
* the bytes a browser sends for a no-cors ``fetch`` POST whose body is a DAP ``evaluate``, a TLS
  ClientHello, a WebSocket upgrade and garbage, against a lazy and an eager ``rtdebug run`` rank:
  nothing runs (the marker file the evaluate would write never appears), a lazy rank does not even
  start debugpy, and the owner attaches afterwards and stops at a breakpoint;
* 2000 connects as another uid: the rank spends <= 1 s of CPU on all of them, prints about one line a
  second, records the final count, and the owner's attach during a flood stops within 2 s.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time

import pytest

from rtdebug.rank.endpoint import dapgate
from rtdebug.rank.endpoint.dapgate import MAX_MESSAGE, NotDAP, message_end, read_first
from rtdebug.rank.endpoint.refusals import RefusalLog

from support.dap import DAPClient
from support.hostile import browser_post, cpu_seconds, flood, send
from support.jobs import read_ranks, wait_ranks
from support.paths import SCRIPTS, marker_line
from support.users import NOBODY, SETPRIV, needs_setpriv
from support.venvjobs import debugpy_loaded, stop_in
from support.wait import finishes, until

SCRIPT = SCRIPTS / "torch_free.py"
INIT = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {"adapterID": "x"}}).encode()


def dap(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def websocket_upgrade(port: int) -> bytes:
    return (
        f"GET /debug HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Origin: https://evil.example\r\n\r\n"
    ).encode()


def tls_hello() -> bytes:
    """A real ClientHello, as ``https://127.0.0.1:PORT`` would open."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


GARBAGE = b"\x00\xff\x13garbage\r\n\r\n{}"


# -- the first-message check ------------------------------------------------------------------------


def test_an_initialize_request_is_a_whole_message_and_a_prefix_waits_for_more():
    msg = dap(INIT)
    assert message_end(msg) == len(msg)
    assert message_end(msg + b"Content-Length: 2\r\n\r\n{}") == len(msg)  # what follows is passed on as is
    assert message_end(b"content-length:%d\r\n\r\n" % len(INIT) + INIT) is not None  # name case, no space
    for cut in (1, 7, 15, 17, 19, 20, len(msg) - 1):
        assert message_end(msg[:cut]) is None, cut


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "an HTTP request ('POST / HTTP/1.1'), not DAP"),
        (websocket_upgrade(5678), "a WebSocket upgrade ('GET /debug HTTP/1.1'), not DAP"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "a TLS handshake, not DAP"),
        (GARBAGE, "not DAP: it starts with '\\x00\\xff\\x13garbage\\r\\n\\r\\n{}', not 'Content-Length: '"),
        (b"Content-Type: x\r\n", "not DAP: it starts with 'Content-Type: x\\r', not 'Content-Length: '"),
        (b"Content-Length: 2\r\nContent-Type: x\r\n\r\n{}", dapgate.BAD_HEADER),
        (b"Content-Length: 1234567890\r\n\r\n", dapgate.BAD_HEADER),
        (b"Content-Length: \r\n\r\n", dapgate.BAD_HEADER),
        (b"Content-Length: 70000\r\n\r\n", "a first DAP message of 70000 bytes, over the 65536-byte limit"),
        (dap(b"{nope"), "the first DAP message is not JSON"),
        (dap(b"[1]"), "the first DAP message is not a JSON object"),
        (dap(b'{"seq":1,"type":"request","command":"evaluate"}'), (
            "the first DAP message is ('request', 'evaluate'), not an 'initialize' request")),
        (dap(b'{"type":"event","command":"initialize"}'), (
            "the first DAP message is ('event', 'initialize'), not an 'initialize' request")),
        (dap(b'{"type":"request"}'), "the first DAP message is ('request', 'None'), not an 'initialize' request"),
    ],
)  # fmt: skip
def test_anything_but_initialize_first_is_refused_with_its_reason(data, reason):
    with pytest.raises(NotDAP) as err:
        message_end(data)
    assert str(err.value) == reason


def test_deep_json_is_refused_not_a_crash():
    body = b"[" * 30000 + b"]" * 30000
    with pytest.raises(NotDAP) as err:
        message_end(dap(body))
    assert str(err.value) == "the first DAP message is not JSON"


def test_read_first_is_bounded_in_time_and_passes_everything_read_on():
    a, b = socket.socketpair()
    with a, b:
        b.sendall(dap(INIT)[:10])
        with pytest.raises(NotDAP) as err:  # it gives up by itself (the peer never sends the rest, nor closes)
            finishes(lambda: read_first(a, deadline_s=0.3), 60, "read_first on half a message, deadline 0.3 s")
        assert str(err.value) == "no complete DAP message within 0.3 s"
    a, b = socket.socketpair()
    with a, b:
        extra = dap(b'{"seq":2,"type":"request","command":"attach"}')
        b.sendall(dap(INIT) + extra)
        assert read_first(a, deadline_s=5) == dap(INIT) + extra and a.gettimeout() is None
    a, b = socket.socketpair()
    with a, b:
        b.sendall(dap(INIT)[:20])
        b.close()
        with pytest.raises(NotDAP) as err:
            read_first(a, deadline_s=5)
        assert str(err.value) == "closed before a complete DAP message"
    assert MAX_MESSAGE == 65536


def test_refusal_log_reports_once_a_second_and_loses_no_count():
    now = [100.0]
    reports: list[str] = []
    log = RefusalLog(reports.append, interval=1.0, clock=lambda: now[0])
    log.add(lambda: "refused A")
    for i in range(5):
        log.add(lambda i=i: f"refused B{i}")
    assert reports == ["refused A"]
    assert log._timer is not None
    log._timer.cancel()  # the test drives time itself
    now[0] += 1.0
    log.flush()
    assert reports == ["refused A", "5 more refused since the last line, the latest: refused B4"]
    log.add(lambda: "refused C")  # within a second of the summary: held back too
    log._timer.cancel()
    now[0] += 1.0
    log.flush()
    log.flush()  # nothing held: nothing reported
    assert reports[2:] == ["1 more refused since the last line, the latest: refused C"]
    now[0] += 1.0
    log.add(lambda: "refused D")  # a quiet second later: at once
    assert reports[3:] == ["refused D"]


def test_refusal_log_timer_reports_the_rest_by_itself():
    reports: list[str] = []
    log = RefusalLog(reports.append, interval=0.2)
    for _ in range(3):
        log.add(lambda: "refused")
    deadline = time.monotonic() + 5
    while len(reports) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reports == ["refused", "2 more refused since the last line, the latest: refused"]


# -- a real rank --------------------------------------------------------------------------------------


def _start(job, registry_dir, port: int, tmp_path, *extra: str) -> dict:
    ctl = tmp_path / "ctl"
    ctl.mkdir(exist_ok=True)
    j = job("run", "--port", str(port), *extra, str(SCRIPT), str(ctl))
    rank = wait_ranks(registry_dir, j.session_id(), 1)[0]
    j.wait_output("script started")
    return {"job": j, "pid": rank["pid"], "sid": rank["session_id"]}


def _wait_refused(registry_dir, sid: str, want: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = read_ranks(registry_dir, sid)[0].get("refused_count")
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _refusals_in(lines: list[str]) -> int:
    """Refusals a rank's lines account for: one per line of its own, N per "N more refused" line."""
    counts = [line.split(": ")[2].split()[0] for line in lines]  # "rtdebug: rank 0: 1999 more refused ..."
    return sum(int(n) if n.isdigit() else 1 for n in counts)


def _attach_and_stop(port: int) -> tuple[DAPClient, dict]:
    work = marker_line(SCRIPT, "work")
    c = DAPClient("127.0.0.1", port)
    c.attach({str(SCRIPT): [work]})
    return c, stop_in(c, work, "work")


def _release(c: DAPClient, frame: dict) -> None:
    c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
    c.continue_(frame["threadId"])
    c.disconnect()


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_browser_post_tls_websocket_and_garbage_reach_nothing(
    job, registry_dir, port_base, tmp_path, mode, monkeypatch
):
    monkeypatch.setenv("RTDEBUG_WARM_S", "0")  # lazy means no debugpy at all here, however slow the machine
    rank = _start(job, registry_dir, port_base, tmp_path, *(["--eager"] if mode == "eager" else []))
    marker = tmp_path / "marker"
    hostile = [browser_post(port_base, str(marker)), tls_hello(), websocket_upgrade(port_base), GARBAGE]
    assert [send(port_base, data) for data in hostile] == [b""] * 4  # reset, never an answer
    assert _wait_refused(registry_dir, rank["sid"], 4) == 4
    assert debugpy_loaded(rank["pid"]) == (mode == "eager")  # a lazy rank did not even start debugpy
    lines = until(
        lambda: [line for line in rank["job"].output().splitlines() if "refused" in line],
        30,
        "the rank's lines account for its 4 refusals",
        ok=lambda lines: _refusals_in(lines) == 4,
    )
    assert not marker.exists()
    assert len(lines) <= 3, lines  # at once, then the rest held back a second
    assert lines[0].startswith("rtdebug: rank 0: refused debug connection from 127.0.0.1:")
    assert lines[0].endswith(f"(uid {os.geteuid()}): an HTTP request ('POST / HTTP/1.1'), not DAP")
    assert lines[-1].startswith("rtdebug: rank 0: ") and " more refused since the last line, the latest: " in lines[-1]
    # each connection is judged in its own thread, so the latest of the held-back three may be any of them
    assert lines[-1].endswith(("a TLS handshake, not DAP", "not DAP", "not 'Content-Length: '")), lines[-1]
    c, frame = _attach_and_stop(port_base)  # the owner's DAP client gets in after all that
    assert c.evaluate(f"__import__('os').path.exists({str(marker)!r})", frame["id"]) == "False"
    _release(c, frame)
    assert not marker.exists()


@pytest.mark.e2e
@needs_setpriv
def test_a_flood_from_another_uid_costs_the_rank_little_and_never_stalls_the_owner(
    job, registry_dir, port_base, tmp_path
):
    rank = _start(job, registry_dir, port_base, tmp_path)
    before = cpu_seconds(rank["pid"])
    got = flood(port_base, 2000, prefix=SETPRIV)
    used = cpu_seconds(rank["pid"]) - before
    assert (got["uid"], got["done"], got["replied"]) == (NOBODY, 2000, 0), got
    assert used <= 1.0, f"2000 refusals cost the rank {used:.2f} CPU-s"
    assert _wait_refused(registry_dir, rank["sid"], 2000) == 2000  # the held-back count is recorded
    lines = [line for line in rank["job"].output().splitlines() if "refused" in line]
    assert _refusals_in(lines) == 2000 and len(lines) <= got["seconds"] + 2, lines
    assert lines[-1].startswith("rtdebug: rank 0: ") and f"(uid {NOBODY}): its socket belongs" in lines[-1]

    # the owner attaches while another uid keeps flooding
    stop, floods = threading.Event(), []

    def keep_flooding() -> None:
        while not stop.is_set():
            floods.append(flood(port_base, 4000, prefix=SETPRIV))

    flooder = threading.Thread(target=keep_flooding, daemon=True)
    flooder.start()
    try:
        deadline = time.monotonic() + 30
        while read_ranks(registry_dir, rank["sid"])[0]["refused_count"] == 2000:  # the flood is on
            assert time.monotonic() < deadline, "the second flood never reached the rank"
            time.sleep(0.02)
        # never stalled: the attach completes (the client's own deadlines fail it otherwise) while the flood
        # is still on; how long it takes is measured by bench/probes/refusal_bench.py --attach
        c, frame = _attach_and_stop(port_base)
        during = flooder.is_alive() and not stop.is_set()
    finally:
        stop.set()
        flooder.join(120)
    assert during and floods and all(f["replied"] == 0 and f["done"] == 4000 for f in floods), floods
    _release(c, frame)


@pytest.mark.e2e
def test_half_open_owner_connections_never_keep_the_owner_out(job, registry_dir, port_base, tmp_path):
    """More half-open connections than the rank keeps (each sent half a header and stopped): the oldest are
    dropped for newer ones, so the owner's real client always gets in."""
    from rtdebug.rank.endpoint.port import MAX_PENDING

    rank = _start(job, registry_dir, port_base, tmp_path)
    held = []
    try:
        for _ in range(MAX_PENDING + 8):
            s = socket.create_connection(("127.0.0.1", port_base), timeout=10)
            s.sendall(b"Content-Length: ")  # half a header, never finished
            held.append(s)
        c, frame = _attach_and_stop(port_base)  # before the fix: refused, 64 connections still sending
        _release(c, frame)
    finally:
        for s in held:
            s.close()
    out = rank["job"].output()
    assert f"dropped for a newer connection ({MAX_PENDING} were half-open)" in out, out[-3000:]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "junk,why",
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "it sent an HTTP request ('GET / HTTP/1.1'), not DAP"),
        (dap(b"{not json"), "it sent a DAP message that is not JSON"),
        (dap(b"[1, 2]"), "it sent a DAP message that is not a JSON object with a 'type'"),
        (b"Content-Length: 5\r\nX-Evil: 1\r\n\r\nhello", "it sent a DAP header other than 'Content-Length: N'"),
    ],
)
def test_junk_after_initialize_closes_the_client_with_one_line_and_no_pydevd_traceback(
    job, registry_dir, port_base, tmp_path, junk, why
):
    rank = _start(job, registry_dir, port_base, tmp_path)
    with socket.create_connection(("127.0.0.1", port_base), timeout=30) as s:
        s.sendall(dap(INIT) + junk)
        try:
            while s.recv(65536):  # pydevd's answer to initialize, then the close
                pass
        except OSError:
            pass
    line = f"rtdebug: rank 0: closed a client after its 'initialize': {why}"
    rank["job"].wait_output(line, timeout=30)
    c, frame = _attach_and_stop(port_base)  # the owner's client still gets in and stops
    _release(c, frame)
    out = rank["job"].output()
    assert "Traceback" not in out and out.count("closed a client after its 'initialize'") == 1, out[-3000:]
