"""The rank's relay between a client and pydevd (``rtdebug.rank.endpoint.relay``), over real socketpairs: a
``terminate`` reaches pydevd as a detach and the client is told; pydevd's stops reach the rank's hook."""

from __future__ import annotations

import json
import socket

from rtdebug.rank.endpoint.relay import Relay, frame

KEEPS = "rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`\n"


def _read(sock: socket.socket) -> list[dict]:
    sock.settimeout(5)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
        sock.settimeout(0.2)
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        n = int(head.split(b":")[1])
        out.append(json.loads(rest[:n]))
        data = rest[n:]
    return out


def _relay(seen: list) -> tuple[Relay, socket.socket, socket.socket]:
    client, client_far = socket.socketpair()
    upstream, pydevd = socket.socketpair()
    return Relay(client, upstream, "rank 1", lambda kind, body: seen.append((kind, body))), client_far, pydevd


def test_terminate_goes_to_pydevd_as_a_detach_and_its_answer_back_as_terminate():
    seen: list = []
    relay, client, pydevd = _relay(seen)
    sent = relay._from_client(b"", {"seq": 7, "type": "request", "command": "terminate", "arguments": {}})
    msg = json.loads(sent.partition(b"\r\n\r\n")[2])
    assert msg == {"seq": 7, "type": "request", "command": "disconnect",
                   "arguments": {"restart": False, "terminateDebuggee": False}}  # fmt: skip
    relay._from_pydevd(b"", json.dumps({"type": "response", "request_seq": 7, "command": "disconnect",
                                        "success": True, "seq": 3}).encode())  # fmt: skip
    relay.client.close()
    told = _read(client)
    assert told[0]["event"] == "output" and told[0]["body"]["output"] == KEEPS
    assert (told[1]["type"], told[1]["command"], told[1]["request_seq"]) == ("response", "terminate", 7)
    assert told[2]["event"] == "terminated"
    pydevd.close()


def test_a_terminate_with_a_malformed_seq_is_still_a_detach():
    relay, client, _ = _relay([])
    msg = {"seq": ["x"], "type": "request", "command": "terminate"}
    assert json.loads(relay._from_client(frame(msg), msg).partition(b"\r\n\r\n")[2])["command"] == "disconnect"
    relay.client.close()
    assert _read(client)[0]["body"]["output"] == KEEPS


def test_disconnect_with_terminate_debuggee_goes_on_without_it():
    relay, client, _ = _relay([])
    msg = {"seq": 2, "type": "request", "command": "disconnect", "arguments": {"terminateDebuggee": True}}
    sent = json.loads(relay._from_client(frame(msg), msg).partition(b"\r\n\r\n")[2])
    assert sent["arguments"] == {"terminateDebuggee": False}
    plain = {"seq": 3, "type": "request", "command": "disconnect", "arguments": {"terminateDebuggee": False}}
    assert relay._from_client(frame(plain), plain) == frame(plain)  # a detach is passed on as it came
    relay.client.close()
    assert _read(client)[0]["body"]["output"] == KEEPS


def test_pydevds_stops_and_the_clients_continue_reach_the_hook():
    seen: list = []
    relay, client, _ = _relay(seen)
    stopped = {"type": "event", "event": "stopped", "seq": 4, "body": {"reason": "breakpoint", "threadId": 1}}
    relay._from_pydevd(frame(stopped), json.dumps(stopped).encode())
    cont = {"seq": 5, "type": "request", "command": "continue", "arguments": {"threadId": 1}}
    relay._from_client(frame(cont), cont)
    assert seen == [("stopped", {"reason": "breakpoint", "threadId": 1}), ("continue", {"threadId": 1})]
    relay.client.close()
    assert _read(client) == [stopped]  # pydevd's message reaches the client unchanged


def test_steps_reach_the_hook_and_an_attach_keeps_rtdebugs_frames_out_unless_it_says_otherwise():
    seen: list = []
    relay, client, _ = _relay(seen)
    for n, command in enumerate(("next", "stepIn", "stepOut", "goto")):
        step = {"seq": 10 + n, "type": "request", "command": command, "arguments": {"threadId": 1}}
        assert relay._from_client(frame(step), step) == frame(step)
    assert seen == [("step", {"threadId": 1})] * 3  # a goto runs nothing: not a step

    def sent(arguments) -> dict:
        attach = {"seq": 1, "type": "request", "command": "attach", "arguments": arguments}
        return json.loads(relay._from_client(frame(attach), attach).partition(b"\r\n\r\n")[2])["arguments"]

    hide = {"module": "rtdebug", "include": False}
    assert sent({"justMyCode": False})["rules"] == [hide]
    assert sent({"rules": [{"path": "/x", "include": False}]})["rules"] == [{"path": "/x", "include": False}, hide]
    assert sent({"rules": "junk"})["rules"] == [hide]
    shown = {"module": "rtdebug", "include": True}  # a user debugging rtdebug itself
    assert sent({"rules": [shown]})["rules"] == [shown]
    relay.client.close()
    client.close()
