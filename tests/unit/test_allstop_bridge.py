"""All-stop across nodes (``rtdebug.rank.allstop_nodes``): its wire, and bridges of two "nodes" (two session
directories, two ranks each, real boards) through a real torch TCPStore server. What a hostile store writer can
do: write any key, at any number, of any size; none of it may pause a rank or break a bridge."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from rtdebug.rank import allstop, allstop_nodes
from rtdebug.rank.allstop import RUNNING, STOPPED, AllStop, Board
from rtdebug.rank.allstop_nodes import Bridge, Change, Seen, change_key, decode, encode, seq_key
from rtdebug.registry import signing
from rtdebug.registry.c10d import rank_key
from rtdebug.registry.tcpstore import TCPStoreClient

from support.wait import until

SECRET = "allstop-nodes-unit-secret-0123456789"
RUN = "job"


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    s = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    yield s


class _Pub:
    """What ``allstop_nodes.arm`` reads of a rank's publisher (``rtdebug.rank.publish.Publisher``)."""

    def __init__(self, port: int, secret: str | None = SECRET, run_id: str = RUN) -> None:
        self.host, self.port, self.run_id, self.secret = "127.0.0.1", port, run_id, secret


def _bridge(tmp_path: Path, node: str, rank: int, port: int, secret: str = SECRET) -> Bridge:
    sdir = tmp_path / node
    sdir.mkdir(exist_ok=True)
    board = Board(sdir / allstop.FILE)
    part = AllStop(board, rank, None, None)
    return Bridge(part, "127.0.0.1", port, RUN, secret, node, Seen(sdir / allstop_nodes.FILE))


@pytest.fixture
def nodes(tmp_path, store):
    """Node A (ranks 0, 1) and node B (ranks 2, 3), every rank's bridge started and watching."""
    made = {r: _bridge(tmp_path, "A" if r < 2 else "B", r, store.port) for r in range(4)}
    for b in made.values():
        b.start()
    until(lambda: all(b.last is not None for b in made.values()), 30, "every watcher connected")
    yield made
    for b in made.values():
        b.close()


def _state(b: Bridge) -> tuple[int, int, int]:
    """(mode, by, setter pid) of a bridge's board."""
    _, mode, by = b.board.read()
    return mode, by, allstop_nodes.board_pid(b.board)


# -- the wire -----------------------------------------------------------------------------------------------
def test_a_change_is_read_back_only_with_its_secret_key_and_number():
    key = change_key(RUN, 7)
    raw = encode(key, Change(7, STOPPED, 3, "sid-b"), SECRET)
    assert decode(key, raw, SECRET, 7) == Change(7, STOPPED, 3, "sid-b")
    assert decode(key, raw, "another-secret-of-16-chars-or-more", 7) is None  # another job's secret
    assert decode(change_key(RUN, 8), raw, SECRET, 8) is None  # moved to another number
    assert decode(change_key("other", 7), raw, SECRET, 7) is None  # moved to another job's key
    assert decode(key, raw.replace(b'"mode":1', b'"mode":0'), SECRET, 7) is None  # a stop turned into a continue
    assert decode(key, raw, SECRET, 6) is None
    assert decode(key, b"", SECRET, 7) is None and decode(key, None, SECRET, 7) is None
    assert decode(key, raw[raw.index(b"\n") + 1 :], SECRET, 7) is None  # the body alone, unsigned


def test_a_signed_value_is_still_checked_field_by_field_and_a_long_one_from_its_length():
    key = change_key(RUN, 1)

    def signed(body: bytes) -> bytes:
        return allstop_nodes.signed(key, body, SECRET)

    good = {"g": 1, "mode": 1, "by": 0, "node": "n"}
    assert decode(key, signed(json.dumps(good).encode()), SECRET, 1) is not None
    for bad in ({"mode": 2}, {"mode": True}, {"by": -1}, {"by": "0"}, {"by": 1 << 40}, {"node": ""},
                {"node": "x" * 200}, {"g": 2}, {"step": 1}):  # fmt: skip
        assert decode(key, signed(json.dumps(dict(good, **bad)).encode()), SECRET, 1) is None, bad
    assert decode(key, signed(b"[1, 2]"), SECRET, 1) is None
    assert decode(key, signed(b"{not json"), SECRET, 1) is None
    padded = signed(json.dumps(dict(good, pad="x" * allstop_nodes.MAX_VALUE)).encode())
    assert decode(key, padded, SECRET, 1) is None  # refused before its MAC is computed


# -- bridges through a real store -----------------------------------------------------------------------------
def test_a_stop_on_node_b_is_applied_once_on_node_a_and_a_continue_there_reaches_b(nodes):
    a0, a1, b2, b3 = nodes[0], nodes[1], nodes[2], nodes[3]
    gen_a = a0.board.gen()
    b2.board.publish(STOPPED, 2)  # rank 2 stopped at a breakpoint (AllStop._stopped)
    until(lambda: _state(a0), 30, "node A's board says rank 2 stopped", ok=lambda s: s == (STOPPED, 2, 0))
    assert _state(a1) == (STOPPED, 2, 0)  # one board per node: a1 shares a0's
    assert a0.applied + a1.applied == 1 and a0.board.gen() == gen_a + 1  # applied once, by one of A's ranks
    assert b2.applied == b3.applied == 0  # node B's own change is never applied back (no echo)
    assert not a0.board.step_stop()

    a1.board.publish(RUNNING, 1)  # a continue in rank 1's client (AllStop.on_dap "continue")
    until(lambda: _state(b3), 30, "node B's board says running, by rank 1", ok=lambda s: s == (RUNNING, 1, 0))
    assert b2.applied + b3.applied == 1
    until(lambda: all(b.last == 2 for b in nodes.values()), 30, "every watcher read both changes")
    assert _state(a0)[:2] == (RUNNING, 1) and a0.applied + a1.applied == 1  # nothing came back to A


def test_a_steps_stop_stays_a_steps_stop_on_the_other_node(nodes):
    a0, b2 = nodes[0], nodes[2]
    b2.board.publish(STOPPED, 2, step=True)  # rank 2's step came back (AllStop: the board's KIND)
    until(lambda: _state(a0), 30, "node A's board says rank 2 stopped", ok=lambda s: s == (STOPPED, 2, 0))
    assert a0.board.step_stop()  # a rank of node A stepping itself is not paused by it
    b2.board.publish(STOPPED, 2)
    until(lambda: a0.last, 30, "node A read the next change", ok=lambda g: g == 2)
    assert _state(a0) == (STOPPED, 2, 0) and not a0.board.step_stop()


def _newest(b: Bridge) -> int:
    with b.seen.locked() as box:
        return box[0]


def test_an_older_change_reaching_a_node_after_its_own_newer_one_is_not_applied(nodes, store):
    a0, a1, b2 = nodes[0], nodes[1], nodes[2]
    with TCPStoreClient("127.0.0.1", store.port) as c:
        g_stop = c.add(seq_key(RUN), 1)  # node B's stop takes its number first ...
        a0.board.publish(RUNNING, 0)  # ... node A's continue the next one
        until(lambda: _newest(a0), 30, "node A's continue numbered", ok=lambda g: g == g_stop + 1)
        key = change_key(RUN, g_stop)
        c.set(key, encode(key, Change(g_stop, STOPPED, 2, "B"), SECRET))  # B's stop lands after it
    until(lambda: (a0.last, a1.last), 30, "node A's watchers read on", ok=lambda x: x == (g_stop + 1,) * 2)
    assert _state(a0)[:2] == (RUNNING, 0) and a0.applied + a1.applied == 0  # the stale stop lost
    assert a0.apply(Change(g_stop, STOPPED, 2, "B")) is False
    until(lambda: _state(b2), 30, "node B has A's continue", ok=lambda s: s == (RUNNING, 0, 0))


def test_a_change_from_elsewhere_landing_between_a_ranks_own_and_its_number_loses_to_it(tmp_path, store):
    a0 = _bridge(tmp_path, "A", 0, store.port)
    a0.board.publish(RUNNING, 0)  # this rank's continue, on the board (no writer: the bridge is not started)
    a0.last = 0
    assert a0.apply(Change(1, STOPPED, 2, "B")) is True  # an older stop from B lands meanwhile (number 1)
    assert _state(a0) == (STOPPED, 2, 0)
    with TCPStoreClient("127.0.0.1", store.port) as c:
        c.add(seq_key(RUN), 1)  # number 1 is B's
        assert a0.send(c, RUNNING, 0) == 2  # A's continue gets number 2: it is put back on the board
    assert _state(a0)[:2] == (RUNNING, 0) and allstop_nodes.board_pid(a0.board) > 0
    a0.seen.close()


def test_forged_planted_and_oversized_values_pause_nobody_and_the_bridge_goes_on(nodes, store):
    a0, a1, b2 = nodes[0], nodes[1], nodes[2]
    gen_a = a0.board.gen()
    with TCPStoreClient("127.0.0.1", store.port) as c:
        ahead = change_key(RUN, c.add(seq_key(RUN), 0) + 1)
        c.set(ahead, b"planted ahead of the counter")  # nobody took this number: deleted unread
        until(lambda: not c.check([ahead]), 30, "the planted key deleted by a watcher")
        for forged in (
            encode("x", Change(0, STOPPED, 9, "evil"), SECRET),  # signed for another key
            encode("k", Change(0, STOPPED, 9, "evil"), "an-attackers-own-secret-0123456789"),
            b"x" * (64 << 10),  # oversized: refused from its length, the watcher reconnects
            b'{"g": 1, "mode": 1, "by": 9, "node": "evil"}',
        ):
            g = c.add(seq_key(RUN), 1)
            c.set(change_key(RUN, g), forged)
            until(lambda g=g: a0.last == g and a1.last == g, 30, f"node A's watchers past number {g}")
        assert a0.board.gen() == gen_a and _state(a0)[0] == RUNNING  # nothing applied, nobody paused
    b2.board.publish(STOPPED, 2)  # and a genuine stop still goes through
    until(lambda: _state(a0), 30, "node A's board says rank 2 stopped", ok=lambda s: s == (STOPPED, 2, 0))


def _entry(store, rank: int, **fields) -> None:
    key = rank_key(RUN, rank)
    store.set(key, json.dumps(signing.sign(key, dict({"rank": rank}, **fields), SECRET)))


def test_a_remote_stop_lets_go_when_its_rank_ended_or_stopped_beating(nodes, store, monkeypatch):
    monkeypatch.setattr(allstop_nodes, "LIVE_S", 0.2)
    monkeypatch.setattr(allstop_nodes, "LOST_S", 1.0)
    a0, b2, b3 = nodes[0], nodes[2], nodes[3]
    # rank 2 stopped, then ended (its entry says so): node A lets go, and tells node B
    _entry(store, 2, state="attached", tick=5)
    b2.board.publish(STOPPED, 2)
    until(lambda: _state(a0), 30, "node A held by rank 2", ok=lambda s: s == (STOPPED, 2, 0))
    forged = rank_key(RUN, 2)
    store.set(forged, json.dumps({"rank": 2, "state": "failed", "mac": "0" * 64}))  # unsigned: says nothing
    _entry(store, 2, state="failed", tick=6)
    until(lambda: _state(a0)[0], 30, "node A let go of rank 2's stop", ok=lambda m: m == RUNNING)
    assert _state(a0)[1] == 2 and allstop_nodes.board_pid(a0.board) > 0  # published here, to the store too
    until(lambda: _state(b3)[0], 30, "node B told", ok=lambda m: m == RUNNING)

    # rank 3 stopped, its heartbeat stops moving (a SIGKILL, its node gone): let go after LOST_S
    _entry(store, 3, state="attached", tick=7)
    b3.board.publish(STOPPED, 3)
    until(lambda: _state(a0), 30, "node A held by rank 3", ok=lambda s: s == (STOPPED, 3, 0))
    until(lambda: _state(a0)[0], 30, "node A let go of rank 3's stale stop", ok=lambda m: m == RUNNING)


def test_a_live_remote_stop_holds(nodes, store, monkeypatch):
    monkeypatch.setattr(allstop_nodes, "LIVE_S", 0.1)
    monkeypatch.setattr(allstop_nodes, "LOST_S", 0.6)
    a0, b2 = nodes[0], nodes[2]
    _entry(store, 2, state="attached", tick=1)
    b2.board.publish(STOPPED, 2)
    until(lambda: _state(a0), 30, "node A held by rank 2", ok=lambda s: s == (STOPPED, 2, 0))
    for tick in range(2, 14):  # its heartbeat moves on (a paused rank's publisher is a hidden thread)
        _entry(store, 2, state="attached", tick=tick)
        until(lambda t=tick: a0.watched is not None and a0.watched[2] == t, 10, f"tick {tick} read")
    assert _state(a0) == (STOPPED, 2, 0)


def test_no_secret_no_store_or_no_all_stop_starts_nothing(tmp_path, store):
    import threading

    before = {t.name for t in threading.enumerate()}
    sdir = tmp_path / "s"
    sdir.mkdir()
    part = AllStop(Board(sdir / allstop.FILE), 0, None, None)
    assert allstop_nodes.arm(part, None, sdir, "s") is None  # single node: no store
    assert allstop_nodes.arm(part, _Pub(store.port, secret=None), sdir, "s") is None
    assert allstop_nodes.arm(None, _Pub(store.port), sdir, "s") is None
    assert not (sdir / allstop_nodes.FILE).exists() and part.board.on_publish == []
    assert {t.name for t in threading.enumerate()} == before
    bridge = allstop_nodes.arm(part, _Pub(store.port), sdir, "s")
    assert bridge is not None and part.board.on_publish == [bridge.on_publish]
    allstop_nodes.close()
    assert part.board.on_publish == [] and not bridge.watcher.is_alive()
