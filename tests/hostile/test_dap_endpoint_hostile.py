"""The job's DAP endpoint against clients that misbehave: one that sends requests and never reads a response
must not hold the endpoint open past its end (a SIGTERM, the job's end), and a reverse response with a
``request_seq`` that is no number closes nothing and prints no traceback."""

from __future__ import annotations

import json
import re
import signal
import socket

import pytest

from support.dap import DAPClient
from support.jobs import Job
from support.paths import EXAMPLES
from support.ports import port_free
from support.wait import until

pytestmark = pytest.mark.e2e
SCRIPT = EXAMPLES / "plain_ddp.py"


def frame(msg: dict) -> bytes:
    data = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def endpoint(job, port_base: int) -> tuple[Job, int]:
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2",
        str(SCRIPT), "--epochs", "100000", "--samples", "64",
    )  # fmt: skip
    sid = j.session_id()
    server = job("dap", "--session", sid)
    out = server.wait_output(" on 127.0.0.1:", 60)
    return server, int(re.search(r"DAP endpoint for session \S+ on 127\.0\.0\.1:(\d+)", out).group(1))


def test_a_client_that_reads_nothing_does_not_hold_the_endpoint_open(job, registry_dir, port_base):
    server, port = endpoint(job, port_base)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(frame({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}))
    s.setblocking(False)
    burst = b"".join(frame({"seq": i, "type": "request", "command": "threads"}) for i in range(2, 1002))

    def stuck() -> bool:  # its responses fill our buffer, then it stops reading ours: a send takes nothing
        try:
            s.send(burst)
        except BlockingIOError:
            return True
        return False

    until(stuck, 60, "the endpoint stops reading a client that reads nothing")
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.output()
    assert "DAP endpoint for session" in server.output() and port_free(port)
    s.close()


def test_a_reverse_response_with_a_bad_request_seq_is_ignored(job, registry_dir, port_base):
    server, port = endpoint(job, port_base)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(frame({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}))
        for seq in ("x", {"a": 1}, [2], 1.5):
            s.sendall(frame({"seq": 2, "type": "response", "request_seq": seq, "success": False}))
        s.sendall(frame({"seq": 3, "type": "request", "command": "threads"}))
        got = b""
        s.settimeout(30)
        while b'"command":"threads"' not in got.replace(b" ", b""):
            chunk = s.recv(65536)
            assert chunk, got  # closed before it answered threads
            got += chunk
    assert "Traceback" not in server.output(), server.output()
    c = DAPClient("127.0.0.1", port)  # the endpoint still serves
    assert c.request("initialize", adapterID="rtdebug-hostile")["supportsTerminateRequest"] is True
    c.close()


def test_clients_cut_short_by_the_endpoints_own_close_are_not_news(job, registry_dir, port_base):
    """50 clients each hold half a header line (slowloris): a proper client is still answered; one that hangs
    up mid-header is said as such once; the endpoint's own close of the rest prints nothing for them."""
    server, port = endpoint(job, port_base)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    for s in held:
        s.sendall(b"Content-Length: 1")
    c = DAPClient("127.0.0.1", port)
    assert c.request("initialize", adapterID="rtdebug-hostile")["supportsTerminateRequest"] is True
    held[0].close()
    server.wait_output("rtdebug: DAP endpoint: closed a client: the stream ended inside a message's headers\n", 30)
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.output()
    assert server.output().count("closed a client") == 1, server.output()
    for s in held[1:]:
        s.close()
    c.close()
