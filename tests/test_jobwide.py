"""Job-wide stacks through a real torch TCPStore: rank-side watchers (``rtdebug.rank.dumpwatch``) in real
processes, the requester (``rtdebug.stacks.jobwide``) with the torch-free client, hostile answers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import timedelta

import pytest

from rtdebug.rank import dumpwatch
from rtdebug.registry import c10d, ray_kv, signing
from rtdebug.registry.tcpstore import TCPStoreClient
from rtdebug.stacks import answer, jobwide

from conftest import PY

SECRET = "jobwide-test-secret-0123456789abcdef"
RUN = "jw"
RANK = """
import sys, time
from rtdebug.rank.dumpwatch import StoreWatch
rank = int(sys.argv[2])
StoreWatch("127.0.0.1", int(sys.argv[1]), "jw", rank, sys.argv[3] or None, {"hostname": "h"}).start()
def in_barrier():
    print("ready", flush=True); time.sleep(600)
def in_allreduce():
    print("ready", flush=True); time.sleep(600)
(in_barrier if rank == 1 else in_allreduce)()
"""


@pytest.fixture(scope="module")
def store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))


@pytest.fixture(scope="module")
def ranks(store, tmp_path_factory):
    script = tmp_path_factory.mktemp("jw") / "rank_main.py"
    script.write_text(RANK)
    procs = [
        subprocess.Popen([PY, str(script), str(store.port), str(r), SECRET], stdout=subprocess.PIPE, text=True)
        for r in range(3)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the watchers are connected and waiting
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def session(n: int = 3, lost: int | None = None) -> dict:
    ranks = [{"rank": r, "state": "ready", "pid": 0} for r in range(n)]
    if lost is not None:
        ranks.append(
            {"rank": lost, "state": "failed", "error": "lost: not heard from for ~12s (its node 10.0.0.2 is gone?)"}
        )
    return {"session_id": "s1", "rdzv_id": RUN, "store": "127.0.0.1:1", "ranks": ranks}


def test_every_rank_answers_once_grouped_and_verified(store, ranks):
    with TCPStoreClient("127.0.0.1", store.port) as c:
        t0 = time.monotonic()
        snap = jobwide.from_store(c, session(lost=7), [SECRET], timeout=5)
        took = time.monotonic() - t0
        groups = {tuple(g["ranks"]): g["label"] for g in snap["groups"]}
        assert set(groups) == {(0, 2), (1,)}, groups
        assert groups[(1,)] == "in_barrier (rank_main.py:7)"
        assert groups[(0, 2)] == "in_allreduce (rank_main.py:9)"
        assert snap["unverified"] == [] and snap["unresponsive"] == [7]  # the lost rank: listed, not waited on
        assert snap["unresponsive_detail"][0]["reason"].startswith("lost: not heard from")
        assert took < 2, took
        # nothing of the request is left but each rank's one newest answer
        left = [k for k in c.list_keys() if "/dump/" in k]
        assert sorted(left) == sorted(c10d.dump_key(RUN, c.add(c10d.dump_seq_key(RUN), 0), r) for r in range(3))
        # a second request: answered again, and the first answers are gone
        snap = jobwide.from_store(c, session(), [SECRET], timeout=5)
        assert sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1, 2]
        assert len([k for k in c.list_keys() if "/dump/" in k]) == 3


def test_without_the_secret_answers_are_unverified_and_a_forged_request_is_ignored(store, ranks):
    with TCPStoreClient("127.0.0.1", store.port) as c:
        job = session()
        job["ranks"][2]["verified"] = False  # as the store view marks an entry signed with another secret
        snap = jobwide.from_store(c, job, ["another-secret-0123456789abcdef"], timeout=1.5)
        # the ranks ignore a request not signed with their secret: nobody answers
        assert snap["groups"] == [] and snap["unresponsive"] == [0, 1, 2]
        assert snap["unresponsive_detail"][0]["reason"] == "no answer within 1.5 s"
        assert snap["unresponsive_detail"][2]["reason"].startswith(
            "no answer within 1.5 s (its entry is not signed with a secret known here: it answers only requests"
        )


def test_a_planted_request_key_does_not_silence_the_next_request(store, ranks):
    """Junk written at the next request number (no secret needed) is passed over by the ranks; the
    requester takes a fresh number instead of writing its own request where they no longer wait."""
    with TCPStoreClient("127.0.0.1", store.port) as c:
        nxt = c.add(c10d.dump_seq_key(RUN), 0) + 1
        c.set(c10d.dump_key(RUN, nxt), b"junk")
        time.sleep(0.5)  # the ranks see it and pass it over
        snap = jobwide.from_store(c, session(), [SECRET], timeout=5.0)
        assert snap["unresponsive"] == [] and sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1, 2]
        c.delete_key(c10d.dump_key(RUN, nxt))


def test_hostile_answers_are_marked_or_refused():
    """A rank's answer key forged by someone who reaches the store: wrong MAC, junk, oversized."""
    n = 10_000
    known = [SECRET]
    dump = answer.take()
    forged = answer.answer(c10d.dump_key(RUN, n, 0), 0, n, dump, "not-the-secret-0123456789abcdef")
    moved = answer.answer(c10d.dump_key(RUN, n, 5), 5, n, dump, SECRET)  # rank 5's, under rank 1's key
    big = json.dumps({"rank": 2, "n": n, "text": "x" * (answer.MAX_TEXT + 1), "main_id": "0x1", "pid": 1})
    raws = {
        0: (c10d.dump_key(RUN, n, 0), forged),
        1: (c10d.dump_key(RUN, n, 1), moved),
        2: (c10d.dump_key(RUN, n, 2), big.encode()),
        3: (c10d.dump_key(RUN, n, 3), b"\xff junk"),
        4: (c10d.dump_key(RUN, n, 4), b" " * (answer.MAX_ANSWER + 1)),
        5: (c10d.dump_key(RUN, n, 5), b"[" * 200_000),  # deeper than the JSON parser goes: RecursionError
    }
    why: dict[int, str] = {}
    dumps = jobwide._take(raws, n, known, why)
    assert list(dumps) == [0] and dumps[0]["verified"] is False
    assert why == {
        1: "its answer is not valid: it names another rank or request than its key",
        2: "its answer is not valid: its dump text is missing or too long",
        3: "its answer is not valid: its answer is not JSON",
        4: f"its answer is not valid: its answer is {answer.MAX_ANSWER + 1} bytes (more than {answer.MAX_ANSWER})",
        5: "its answer is not valid: its answer is not JSON",
    }
    snap = jobwide.snapshot(session(), "store x", dumps, why, [], time.monotonic())
    assert snap["unverified"] == [0]
    assert "answer not signed with a job secret known here" in jobwide.notes(snap)[1]


def test_request_checks():
    key = c10d.dump_key(RUN, 4)
    raw = answer.request(key, 4, ["a" * 20, SECRET])
    assert answer.request_ok(key, raw, SECRET, 3) == 4
    assert answer.request_ok(key, raw, SECRET, 4) is None  # replayed
    assert answer.request_ok(c10d.dump_key(RUN, 5), raw, SECRET, 0) is None  # moved to another key
    assert answer.request_ok(key, raw, "b" * 20, 0) is None  # not our secret
    assert answer.request_ok(key, b"[1]", None, 0) is None
    assert answer.request_ok(key, b"[" * 200_000, None, 0) is None  # nested past the parser: no traceback
    assert signing.MAC not in json.loads(raw)


def test_a_publishing_rank_answers_and_ps_never_reads_the_answers(store):
    """The rank's own publisher starts the watcher; ``ps --store`` skips dump keys (no junk warning, no bytes)."""
    from test_store_view import rank_entry

    from rtdebug.rank import publish
    from rtdebug.views.store import StoreView

    pub = publish.Publisher("127.0.0.1", store.port, "pubjob", 0, secret=SECRET)
    pub.update(rank_entry(0))
    try:
        job = {"session_id": "job-abc123", "rdzv_id": "pubjob", "store": "x", "ranks": [rank_entry(0)]}
        deadline = time.monotonic() + 20
        with TCPStoreClient("127.0.0.1", store.port) as c:
            while True:
                snap = jobwide.from_store(c, job, [SECRET], timeout=2)
                if snap["groups"] or time.monotonic() > deadline:
                    break
        assert [g["ranks"] for g in snap["groups"]] == [[0]] and snap["unverified"] == []
        assert "test_a_publishing_rank_answers" in json.dumps(snap["groups"][0]["threads"])
        view = StoreView("127.0.0.1", store.port, trust=([SECRET], frozenset()))
        raw = view._raw()
        assert c10d.rank_key("pubjob", 0) in raw and not [k for k in raw if "/dump/" in k]
        assert view.skipped == {}
    finally:
        pub.close()


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["--store", "127.0.0.1:1"], 1, "rtdebug: error: cannot reach the job store at 127.0.0.1:1: the job has ended"),
        (["--store", "host:port"], 1, "rtdebug: error: --store 'host:port': expected HOST:PORT"),
        (
            ["--store", "127.0.0.1:1", "--native"],
            2,
            "--native reads this machine's ranks with py-spy: not with --store",
        ),
        (["--store", "a:1", "--ray-address", "b:2"], 2, "--store and --ray-address name two different jobs: give one"),
        (
            ["--pid", "1", "--store", "a:1"],
            2,
            "rtdebug: error: --pid reads one process tree on this machine with py-spy: not with --store",
        ),
        (["--pid", "1", "--rank", "0"], 2, "--pid reads one process tree on this machine with py-spy: not with --rank"),
        (["--ray-address", "127.0.0.1:1"], 1, "rtdebug: error: cannot reach the Ray cluster's GCS at 127.0.0.1:1"),
    ],
)
def test_bad_remote_stacks_arguments_are_one_line(args, code, line, tmp_path):
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(tmp_path / "reg"))
    r = subprocess.run([PY, "-m", "rtdebug", "stacks", *args], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == code and line in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


class MemoryKV(ray_kv._KV):
    """The KV's shared logic over a dict: the polling and parsing under test, not the GCS (full runs:
    tests/test_ray_cluster.py)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def _put(self, key, value):
        self.data[key] = value

    def _get_many(self, keys):
        return {k: self.data[k.decode()] for k in keys if k.decode() in self.data}

    def _keys(self, prefix):
        return [k.encode() for k in self.data if k.startswith(prefix)]

    def _del(self, key, prefix):
        for k in [k for k in self.data if (k.startswith(key) if prefix else k == key)]:
            del self.data[k]


def test_a_ray_answer_is_read_once_while_the_requester_waits_for_the_rest(monkeypatch):
    """Rank 0's worker answers; rank 1's never does: the requester polls until its timeout, and parses
    rank 0's answer once, not on every poll."""
    kv = MemoryKV()
    watch = dumpwatch.KVWatch(kv, "rayjob", 0, SECRET, {"hostname": "h"}).start()
    seen: list[bytes] = []
    real_parse = ray_kv.parse
    monkeypatch.setattr(ray_kv, "parse", lambda v: seen.append(v) or real_parse(v))
    sess = dict(session(2), session_id="rayjob")
    try:
        snap = jobwide.from_kv(kv, sess, [SECRET], None, timeout=2.0)
    finally:
        watch.close()
    assert [g["ranks"] for g in snap["groups"]] == [[0]] and list(snap["unresponsive"]) == [1]
    answers = [v for v in seen if v != b"null"]
    assert len(answers) == 1, f"rank 0's answer parsed {len(answers)} times"


@pytest.mark.parametrize(
    "var, unreachable",
    [
        ("RTDEBUG_STORE", "cannot reach the job store at 127.0.0.1:1"),
        ("RAY_ADDRESS", "cannot reach the Ray cluster's GCS at 127.0.0.1:1"),
    ],
)
def test_stacks_without_a_session_here_asks_the_job_ps_is_set_up_for(tmp_path, var, unreachable):
    """A laptop set up with RTDEBUG_STORE or RAY_ADDRESS (as ``ps`` reads them): ``stacks`` with no local
    session asks that job, and says so when it cannot be reached (the same readers answering, by flag:
    tests/test_multinode.py, tests/test_ray_cluster.py)."""
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(tmp_path / "reg"))
    env.pop("RTDEBUG_STORE", None)
    env.pop("RAY_ADDRESS", None)
    env[var] = "127.0.0.1:1"
    r = subprocess.run([PY, "-m", "rtdebug", "stacks"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("rtdebug: error: no live rtdebug session; start one with"), r.stderr
    assert f"; through ${var} (127.0.0.1:1): {unreachable}" in r.stderr


def test_a_forged_answer_never_steers_the_verdict_nor_the_terminal():
    """Someone who reaches the store writes rank 1's answer before it does, unsigned: its record says it
    waits with the others (hiding the culprit) and its function name carries terminal escapes. Once an
    answer is signed with a known secret, unsigned ones give no verdict; control characters print as '?'."""
    n = 10_001
    rec = {"op": "ALLREDUCE", "seq": 4, "state": "entered", "file": "/j/hang.py", "line": 22, "pg": "0"}
    real = dict(
        answer.take(), text='Thread 0x1 (most recent call first):\n  File "/j/hang.py", line 22 in train_step\n'
    )
    evil = dict(real, text=real["text"].replace("train_step", "x\x1b[2K\x9bhealthy"))
    raws = {
        0: (c10d.dump_key(RUN, n, 0), answer.answer(c10d.dump_key(RUN, n, 0), 0, n, real, SECRET, collective=rec)),
        1: (c10d.dump_key(RUN, n, 1), answer.answer(c10d.dump_key(RUN, n, 1), 1, n, evil, None, collective=rec)),
    }
    why: dict[int, str] = {}
    dumps = jobwide._take(raws, n, [SECRET], why)
    assert why == {} and [dumps[r]["verified"] for r in (0, 1)] == [True, False]
    snap = jobwide.snapshot(session(2), "store x", dumps, why, [], time.monotonic())
    assert snap["verdict"] is None and snap["culprit"] is None and snap["unverified"] == [1]
    from rtdebug.stacks.format import render

    text = render(snap)
    assert "x?[2K?healthy" in text and "\x1b" not in text and "\x9b" not in text
    alone = jobwide.snapshot(session(2), "store x", {0: dumps[0]}, {1: "no answer"}, [], time.monotonic())
    assert alone["culprit"] is None  # rank 1 unanswered: said unresponsive, never named from nothing


class _GivesUp(TCPStoreClient):
    """A rank's client on which the requester gives up (deletes its request, then the done count, as
    ``jobwide.from_store`` does) at one chosen moment: each narrow race of a late answer, made certain."""

    moment = ""

    def set(self, key: str, value: bytes) -> None:
        super().set(key, value)
        self._maybe("answer")

    def check(self, keys: list[str]) -> bool:
        there = super().check(keys)
        self._maybe("check")  # after the rank saw the request still there
        return there

    def _maybe(self, now: str) -> None:
        if now == self.moment:
            for key in (c10d.dump_key("late", 1), c10d.dump_done_key("late", 1)):
                super().delete_key(key)


@pytest.mark.parametrize("moment", ["", "answer", "check"])
def test_a_late_answer_leaves_no_done_count_behind(store, moment):
    watch = dumpwatch.StoreWatch("127.0.0.1", store.port, "late", 4, SECRET, {"hostname": "h"})
    req, done, out = c10d.dump_key("late", 1), c10d.dump_done_key("late", 1), c10d.dump_key("late", 1, 4)
    with TCPStoreClient("127.0.0.1", store.port) as requester, _GivesUp("127.0.0.1", store.port) as rank:
        rank.moment = moment
        requester.set(req, answer.request(req, 1, [SECRET]))
        watch.handle(rank, 1)
        assert requester.check([out])  # answered either way
        # counted while the requester waits; after it gave up, nothing of the request is left
        assert requester.check([done]) is (moment == "")
        for key in (req, done, out):
            requester.delete_key(key)
