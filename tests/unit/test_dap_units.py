"""The job DAP endpoint's parts that need no job: DAP framing read as hostile input, which ranks become child
sessions (``--ranks``, a restarted rank), their names and configurations."""

from __future__ import annotations

import io
import os

import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import process_create_time
from rtdebug.dap import children, relay, wire
from rtdebug.dap.children import RankChoice
from rtdebug.dap.server import JobEndpoint


def frame(body: bytes, headers: bytes | None = None) -> io.BytesIO:
    head = headers if headers is not None else b"Content-Length: %d\r\n\r\n" % len(body)
    return io.BytesIO(head + body)


def test_a_message_is_read_whole_and_a_clean_end_is_none():
    f = frame(b'{"seq":1,"type":"request","command":"initialize"}')
    assert wire.read_message(f) == {"seq": 1, "type": "request", "command": "initialize"}
    assert wire.read_message(f) is None
    event = {"type": "event", "event": "x"}
    assert wire.read_message(io.BytesIO(wire.encode(event))) == event


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "a message without Content-Length"),
        (b"Content-Length: 99999999999\r\n\r\n", "not a number up to"),
        (b"Content-Length: -1\r\n\r\n", "not a number up to"),
        (b"X: y\r\n" * 20, "more than 16 header lines"),
        (b"A" * 5000, "a header line longer than 1024 bytes"),
        (b"Content-Length: 5\r\n\r\nabc", "the stream ended inside a message's body"),
        (b"Content-Length: 3\r\n\r\nabc", "a body that is not JSON"),
        (b"Content-Length: 2\r\n\r\n[]", "not a DAP message"),
        (b"Content-Length: 10\r\n", "the stream ended inside a message's headers"),
    ],
)
def test_what_is_not_dap_is_one_error(data, why):
    with pytest.raises(wire.WireError, match=why):
        wire.read_message(io.BytesIO(data))


def entry(rank: int, pid: int | None = None, **extra) -> dict:
    pid = os.getpid() if pid is None else pid
    e = {"rank": rank, "pid": pid, "create_time": process_create_time(pid), "state": "ready"}
    return {**e, "host": "127.0.0.1", "port": 6000 + rank, "verified": True, **extra}


MESH = {"meshes": [{"dims": ["dp", "tp"], "shape": [2, 2], "coord": [1, 0]}]}


def test_ranks_choice_numbers_mesh_and_mistakes():
    assert RankChoice.parse(None).wants(entry(7)) and RankChoice.parse("all").wants(entry(7))
    two = RankChoice.parse("0,2-3")
    assert [r for r in range(5) if two.wants(entry(r))] == [0, 2, 3]
    dp1 = RankChoice.parse("dp=1,tp=*")
    assert dp1.wants(entry(2, **MESH)) and not dp1.wants(entry(2))  # no mesh published yet: not yet chosen
    for bad, message in [("1-0", "invalid --ranks value '1-0'"), ("none", "--ranks none: selects no rank"),
                         ("dp=", "--ranks 'dp=': 'dp=' is not DIM=N")]:  # fmt: skip
        with pytest.raises(HarnessError, match=message) as exc:
            RankChoice.parse(bad)
        assert exc.value.exit_code == 2


def test_child_names_and_configuration():
    assert children.child_name(entry(1)) == "rank 1"
    assert children.child_name(entry(2, **MESH)) == "rank 2 (dp=1,tp=0)"
    parent = {"type": "python", "name": "job", "request": "attach", "justMyCode": False, "port": 5677,
              "connect": {"host": "127.0.0.1", "port": 5677}, "__sessionId": "x", "processId": 3}  # fmt: skip
    config = children.child_configuration(entry(1), parent)
    assert config == {"type": "python", "name": "rank 1", "request": "attach", "justMyCode": False,
                      "connect": {"host": "127.0.0.1", "port": 6001},
                      "rtdebugRank": {"rank": 1, "pid": os.getpid()}}  # fmt: skip


def test_each_rank_once_and_a_restarted_rank_again():
    seen: set = set()
    session = {"source": "local", "ranks": [entry(1), entry(0), entry(2, state="starting")]}
    first = children.new_ranks(session, RankChoice(), seen)
    assert [e["rank"] for e in first] == [0, 1]  # rank order; a starting rank is not attachable yet
    seen.update(children.key_of(e) for e in first)
    assert children.new_ranks(session, RankChoice(), seen) == []
    parent_pid = os.getppid()  # another live process stands for rank 1's restart
    session["ranks"][0] = entry(1, parent_pid)
    assert [e["pid"] for e in children.new_ranks(session, RankChoice(), seen)] == [parent_pid]
    forged = dict(entry(3), verified=False)
    assert children.new_ranks({"source": "store", "ranks": [forged]}, RankChoice(), set()) == []


def test_a_child_coming_back_names_a_rank_of_the_session_never_an_address():
    session = {"source": "local", "ranks": [entry(0), entry(1), dict(entry(2), verified=False)]}
    assert relay.find(session, {"rank": 1, "pid": os.getpid()})["port"] == 6001
    for mark in [{"rank": 1, "pid": 1}, {"rank": 2, "pid": os.getpid()}, {"rank": 5, "pid": os.getpid()},
                 "rank 1", None, {"rank": 1, "pid": os.getpid(), "host": "evil"} | {"rank": "1"}]:  # fmt: skip
        assert relay.find(session, mark) is None
    session["ranks"][1]["state"] = "exited"
    assert relay.find(session, {"rank": 1, "pid": os.getpid()}) is None


def test_each_change_of_a_ranks_debug_state_is_told_once():
    stopped = {"state": "stopped", "reason": "breakpoint", "file": "/w/train.py", "line": 41, "by": None, "since": 1.0}
    paused = {"state": "paused", "reason": None, "file": "/w/train.py", "line": 50, "by": 1, "since": 1.0}
    running = {"state": "running", "reason": None, "file": None, "line": None, "by": None, "since": 1.0}
    known: dict = {}
    session = {"ranks": [entry(0, debug=running), entry(1, debug=running), entry(2)]}
    assert children.state_lines(session, RankChoice(), known) == []  # running at first: nothing to say
    session["ranks"][:2] = [entry(0, debug=paused), entry(1, debug=stopped)]
    assert children.state_lines(session, RankChoice(), known) == [
        "rank 0: paused (all-stop, by rank 1) at train.py:50",
        "rank 1: stopped at train.py:41 (breakpoint)",
    ]
    assert children.state_lines(session, RankChoice(), known) == []
    session["ranks"][1] = entry(1, debug=running)
    assert children.state_lines(session, RankChoice.parse("1"), known) == ["rank 1: running"]


def test_refusals_are_one_line_a_second_the_rest_counted():
    log = io.StringIO()
    server = JobEndpoint(None, "s", RankChoice(), log=log)  # type: ignore[arg-type]  # no session is read here
    try:
        for _ in range(3):
            server.refused("refused debug connection from 127.0.0.1:1 (uid 65534): its socket belongs to another user")
        assert log.getvalue().count("\n") == 1
        server.last_refusal -= 1.0  # a second later
        server.refused("refused again")
        assert log.getvalue().splitlines()[1] == (
            "rtdebug: DAP endpoint: refused again (and 2 more refused since the last line)"
        )
    finally:
        server.sock.close()
