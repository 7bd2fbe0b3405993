"""Job-wide stacks through a real torch TCPStore: rank-side watchers (``rtdebug.rank.stacks.watch``) in real
processes hung in a real gloo job, the requester (``rtdebug.stacks.jobwide``) with the torch-free client,
hostile answers, planted keys and junk requests (tests/hostile/test_junk_requests.py: what junk costs a rank)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import timedelta

import pytest

from rtdebug.rank.stacks import take as taker
from rtdebug.rank.stacks.watch import KVWatch, StoreWatch, WatchClient
from rtdebug.registry import c10d, ray_kv, signing
from rtdebug.registry.tcpstore import TCPStoreClient
from rtdebug.stacks import jobwide, wire

from support.paths import PY
from support.wait import finishes

SECRET = "jobwide-test-secret-0123456789abcdef"
RUN = "jw"
ARROW = "\u2190"
# rank 1 skips the second all_reduce and waits in barrier; ranks 0 and 2 wait in that all_reduce: the
# classic hang (examples/hang.py), in a gloo group rendezvoused through the test's store
RANK = """
import sys, time
import torch, torch.distributed as dist
from rtdebug.rank.stacks.watch import StoreWatch
port, rank = int(sys.argv[1]), int(sys.argv[2])
StoreWatch("127.0.0.1", port, "jw", rank, sys.argv[3] or None, {"hostname": "h"}).start()
store = dist.PrefixStore("pg", dist.TCPStore("127.0.0.1", port, is_master=False))
dist.init_process_group("gloo", store=store, rank=rank, world_size=3)
t = torch.ones(1)
dist.all_reduce(t)
def in_barrier():
    dist.barrier()
def in_allreduce():
    dist.all_reduce(t)
(in_barrier if rank == 1 else in_allreduce)()
time.sleep(600)
"""
WANT = {(0, 2): "in_allreduce (rank_main.py:14)", (1,): "in_barrier (rank_main.py:12)"}


@pytest.fixture(scope="module")
def store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))


def grouped(snap: dict) -> dict[tuple[int, ...], str]:
    """Ranks -> their group's own frame (the innermost may be torch's)."""
    return {tuple(g["ranks"]): g["label"].split(f" {ARROW} ")[-1] for g in snap["groups"]}


@pytest.fixture(scope="module")
def ranks(store, tmp_path_factory):
    """Three rank processes, hung; yields once a request sees each where the hang holds it."""
    script = tmp_path_factory.mktemp("jw") / "rank_main.py"
    script.write_text(RANK)
    procs = [subprocess.Popen([PY, str(script), str(store.port), str(r), SECRET]) for r in range(3)]
    try:
        deadline = time.monotonic() + 120
        with TCPStoreClient("127.0.0.1", store.port) as c:
            while grouped(snap := jobwide.from_store(c, session(), [SECRET], timeout=5)) != WANT:
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), snap
                time.sleep(0.2)
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
        # the lost rank: listed, never waited on; asked with a timeout far past this deadline, the request
        # returns once the three live ranks answered (how long that takes: bench/probes/store_bench.py, section 2)
        snap = finishes(
            lambda: jobwide.from_store(c, session(lost=7), [SECRET], timeout=300), 60, "a request with a lost rank"
        )
        assert grouped(snap) == WANT
        assert snap["unverified"] == [] and snap["unresponsive"] == [7]
        assert snap["unresponsive_detail"][0]["reason"].startswith("lost: not heard from")
        assert snap["culprit"] == 1, snap["verdict"]  # from the ranks' Flight Recorders
        # nothing of the request is left but each rank's one newest answer, under that request's nonce
        n = c.add(wire.dump_seq_key(RUN), 0)
        left = sorted(k for k in c.list_keys() if k.startswith(f"rtdebug/{RUN}/dump/"))
        assert len(left) == 3 and all(k.startswith(f"rtdebug/{RUN}/dump/{n}/") for k in left), left
        nonce = left[0].split("/")[-2]
        assert wire.nonce_ok(nonce) and left == [wire.answer_key(RUN, n, nonce, r) for r in range(3)]
        # a second request: answered again under its own nonce, and the first answers are gone
        snap = jobwide.from_store(c, session(), [SECRET], timeout=5)
        assert sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1, 2]
        again = [k for k in c.list_keys() if k.startswith(f"rtdebug/{RUN}/dump/")]
        assert len(again) == 3 and not set(again) & set(left)


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
        nxt = c.add(wire.dump_seq_key(RUN), 0) + 1
        c.set(wire.dump_key(RUN, nxt), b"junk")
        # the ranks see it and pass it over. A window, not a wait: passing over junk writes nothing anywhere (by
        # design), so there is no state to poll; it lets the test fail should the requester write at nxt (ranks
        # still waiting there would answer that). Were it too short, the test would pass, never fail, wrongly.
        time.sleep(0.5)
        snap = jobwide.from_store(c, session(), [SECRET], timeout=5.0)
        assert snap["unresponsive"] == [] and sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1, 2]
        c.delete_key(wire.dump_key(RUN, nxt))


def test_hostile_answers_are_marked_or_refused():
    """A rank's answer key forged by someone who reaches the store: wrong MAC, junk, oversized, replayed."""
    n, nonce = 10_000, wire.new_nonce()
    known = [SECRET]
    dump = taker.with_flight()

    def key(r: int) -> str:
        return wire.answer_key(RUN, n, nonce, r)

    forged = wire.answer(key(0), 0, n, nonce, dump, "not-the-secret-0123456789abcdef")
    moved = wire.answer(key(5), 5, n, nonce, dump, SECRET)  # rank 5's, under rank 1's key
    big = json.dumps({"rank": 2, "n": n, "nonce": nonce, "text": "x" * (wire.MAX_TEXT + 1), "main_id": "0x1"})
    earlier = wire.answer(key(6), 6, n, wire.new_nonce(), dump, SECRET)  # a genuine answer to another request
    raws = {
        0: (key(0), forged),
        1: (key(1), moved),
        2: (key(2), big.encode()),
        3: (key(3), b"\xff junk"),
        4: (key(4), b" " * (wire.MAX_ANSWER + 1)),
        5: (key(5), b"[" * 200_000),  # deeper than the JSON parser goes: RecursionError
        6: (key(6), earlier),
    }
    why: dict[int, str] = {}
    dumps = {}
    for r, (k, raw) in raws.items():
        d, w = wire.parse(k, raw, r, n, nonce, known)
        if d is None:
            why[r] = w
        else:
            dumps[r] = d
    assert list(dumps) == [0] and dumps[0]["verified"] is False
    assert why == {
        1: "it names another rank than its key",
        2: "its dump text is missing or too long",
        3: "its answer is not JSON",
        4: f"its answer is {wire.MAX_ANSWER + 1} bytes (more than {wire.MAX_ANSWER})",
        5: "its answer is not JSON",
        6: "it answers another request (its number or nonce is not this one's)",
    }
    snap = jobwide.snapshot(session(), "store x", dumps, {}, [], time.monotonic())
    assert snap["unverified"] == [0]
    assert "answer not signed with a job secret known here (unverified: shown, not counted" in jobwide.notes(snap)[1]


def test_request_checks(monkeypatch):
    key = wire.dump_key(RUN, 4)
    nonce = wire.new_nonce()
    raw = wire.request(key, 4, nonce, ["a" * 20, SECRET])
    assert len(raw) < 300 and wire.request_ok(key, raw, SECRET) == (4, nonce)
    assert wire.request_ok(wire.dump_key(RUN, 5), raw, SECRET) is None  # moved to another key
    assert wire.request_ok(key, raw, "b" * 20) is None  # not our secret
    body = raw.split(b"\n", 1)[1]
    assert wire.request_ok(key, raw.replace(body, body.replace(b"4", b"5")), SECRET) is None  # edited
    # nothing of a value that is oversized, not a request, or not signed with our secret is parsed
    parsed: list[bytes] = []
    real_loads = json.loads
    monkeypatch.setattr(wire.json, "loads", lambda v, *a, **k: parsed.append(v) or real_loads(v, *a, **k))
    sig = raw.split(b"\n", 1)[0]
    for junk in (
        b"x" * (8 << 20),
        sig + b"\n" + b" " * wire.MAX_REQUEST,
        b"[" * 200_000,
        b"[1]",
        raw.replace(b"rtdq1 ", b"rtdq2 "),
        wire.request(key, 4, nonce, ["b" * 20]),
        wire.request(key, 4, nonce, []),
    ):
        assert wire.request_ok(key, junk, SECRET) is None
    assert parsed == []
    # signed, but not a request rtdebug makes: parsed (it is ours), refused
    for value in ([1], {"n": 4}, {"n": 4, "nonce": "../x"}, {"n": True, "nonce": nonce}, {"n": -1, "nonce": nonce}):
        b = json.dumps(value).encode()
        forged = raw.split(b"\n", 1)[0].split(b" ")[0] + b" " + wire._mac(key, b, SECRET) + b"\n" + b
        assert wire.request_ok(key, forged, SECRET) is None
    # a rank without a secret (none was given to its job) takes an unsigned request
    assert wire.request_ok(key, wire.request(key, 4, nonce, []), None) == (4, nonce)
    assert wire.request_ok(key, b"[" * 4000, None) is None  # no traceback


def test_a_publishing_rank_answers_and_ps_never_reads_the_answers(store):
    """The rank's own publisher starts the watcher; ``ps --store`` skips dump keys (no junk warning, no bytes)."""
    from rtdebug.rank import publish
    from rtdebug.views.store import StoreView

    from support.entries import rank_entry

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
    tests/e2e/test_ray_cluster.py)."""

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
    rank 0's answer once, not on every poll. An answer left from an earlier request is not taken."""
    kv = MemoryKV()
    kv.data[wire.dump_answer_key("rayjob", 1)] = wire.answer(
        wire.dump_answer_key("rayjob", 1), 1, 1, wire.new_nonce(), taker.with_flight(), SECRET
    )
    watch = KVWatch(kv, "rayjob", 0, SECRET, {"hostname": "h"}).start()
    seen: list[int] = []
    real_parse = wire.parse
    monkeypatch.setattr(wire, "parse", lambda key, raw, rank, *a: seen.append(rank) or real_parse(key, raw, rank, *a))
    sess = dict(session(2), session_id="rayjob")
    try:
        snap = jobwide.from_kv(kv, sess, [SECRET], None, timeout=2.0)
    finally:
        watch.close()
    assert [g["ranks"] for g in snap["groups"]] == [[0]] and list(snap["unresponsive"]) == [1]
    assert snap["unresponsive_detail"][0]["reason"] == "no answer within 2 s"  # the earlier answer: not this one
    assert seen.count(0) == 1, f"rank 0's answer parsed {seen.count(0)} times"


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
    tests/e2e/test_multinode.py, tests/e2e/test_ray_cluster.py)."""
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(tmp_path / "reg"))
    env.pop("RTDEBUG_STORE", None)
    env.pop("RAY_ADDRESS", None)
    env[var] = "127.0.0.1:1"
    r = subprocess.run([PY, "-m", "rtdebug", "stacks"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("rtdebug: error: no live rtdebug session; start one with"), r.stderr
    assert f"; through ${var} (127.0.0.1:1): {unreachable}" in r.stderr


def _parsed(raws: dict[int, tuple[str, bytes]], n: int, nonce: str) -> dict[int, dict]:
    out = {}
    for r, (key, raw) in raws.items():
        dump, why = wire.parse(key, raw, r, n, nonce, [SECRET])
        assert why is None, why
        out[r] = dump
    return out


REAL = 'Thread 0x1 (most recent call first):\n  File "/j/hang.py", line 22 in train_step\n'


def test_a_forged_answer_never_steers_the_verdict_nor_the_terminal():
    """Someone who reaches the store writes rank 1's answer before it does, unsigned: its record says it
    waits with the others (hiding the culprit) and its function name carries terminal escapes. Only signed
    answers are counted: the verdict speaks of rank 0 alone, and its warning comes first; control
    characters print as '?'."""
    n, nonce = 10_001, wire.new_nonce()
    rec = {"op": "ALLREDUCE", "seq": 4, "state": "entered", "file": "/j/hang.py", "line": 22, "pg": "0"}
    real = dict(taker.with_flight(), text=REAL)
    evil = dict(real, text=real["text"].replace("train_step", "x\x1b[2K\x9bhealthy"))
    k0, k1 = wire.answer_key(RUN, n, nonce, 0), wire.answer_key(RUN, n, nonce, 1)
    raws = {
        0: (k0, wire.answer(k0, 0, n, nonce, real, SECRET, collective=rec)),
        1: (k1, wire.answer(k1, 1, n, nonce, evil, None, collective=rec)),
    }
    dumps = _parsed(raws, n, nonce)
    assert [dumps[r]["verified"] for r in (0, 1)] == [True, False]
    snap = jobwide.snapshot(session(2), "store x", dumps, {}, [], time.monotonic())
    assert snap["verdict"] == "rank 0 is in ALLREDUCE #4 (hang.py:22)" and snap["culprit"] is None
    assert snap["unverified"] == [1]
    assert [g["collectives"] for g in snap["groups"] if 1 in g["ranks"]] == [[]]  # rank 1's record: not counted
    from rtdebug.stacks.text import render

    text = jobwide.with_notes(render(snap), snap)
    assert "x?[2K?healthy" in text and "\x1b" not in text and "\x9b" not in text
    assert text.splitlines()[:2] == [jobwide.warnings(snap)[0], snap["verdict"]]
    alone = jobwide.snapshot(session(2), "store x", {0: dumps[0]}, {1: "no answer"}, [], time.monotonic())
    assert alone["culprit"] is None  # rank 1 unanswered: said unresponsive, never named from nothing


def test_warnings_come_before_the_verdict_and_another_secret_is_one_line():
    """Rank 1's answer is unsigned; ranks 3 and 4 publish entries signed with another secret (their node has
    its own) and do not answer: both are said before the verdict, the other secret once, with its fix."""
    n, nonce = 10_002, wire.new_nonce()
    entered = {"op": "ALLREDUCE", "seq": 4, "state": "entered", "file": "/j/hang.py", "line": 22, "pg": "0"}
    behind = dict(entered, seq=3, state="returned")
    real = dict(taker.with_flight(), text=REAL)
    raws = {}
    for r, rec, secret in ((0, entered, SECRET), (1, entered, None), (2, behind, SECRET)):
        key = wire.answer_key(RUN, n, nonce, r)
        raws[r] = (key, wire.answer(key, r, n, nonce, real, secret, collective=rec))
    dumps = _parsed(raws, n, nonce)
    job = session(5)
    for r in (3, 4):
        job["ranks"][r]["verified"] = False
    why: dict[int, str] = {}
    jobwide._silent(job, [0, 1, 2, 3, 4], dumps, {}, 3.0, why)
    snap = jobwide.snapshot(job, "store x", dumps, why, [], time.monotonic())
    assert snap["culprit"] == 2 and snap["verdict"].startswith("rank 2 never entered ALLREDUCE #4 (hang.py:22)")
    from rtdebug.stacks.text import render

    lines = jobwide.with_notes(render(snap), snap).splitlines()
    shared = signing.shown(signing.config_dir())
    assert lines[:3] == [
        "warning: rank 1: answer not signed with a job secret known here (unverified: shown, not counted in the "
        "verdict; set RTDEBUG_JOB_SECRET as the job did)",
        "warning: ranks 3-4 use another job secret than this machine (so they ignore its request): set "
        f"RTDEBUG_JOB_SECRET to the same value on every node, or share {shared} (the default secret) between them",
        snap["verdict"],
    ]
    assert len([ln for ln in lines if "another job secret" in ln]) == 1
    assert jobwide.other_secret(snap) == [3, 4]
    assert "(every rank of the job, through the store x)" in lines[lines.index(snap["verdict"]) + 2]


def _answers(c: TCPStoreClient, n: int) -> dict[int, tuple[str, bytes]]:
    keys = [k for k in c.list_keys() if k.startswith(f"rtdebug/{RUN}/dump/{n}/") and not k.endswith("/done")]
    return {int(k.rsplit("/", 1)[1]): (k, v) for k, v in zip(keys, c.multi_get(keys), strict=True)}


def test_planted_answers_and_done_counts_for_future_requests_change_nothing(store, ranks):
    """Someone who reaches the store but holds no secret plants, at each of the next request numbers, a
    done count saying every rank answered, and answers that make rank 0 the culprit: unsigned ones, and
    the ranks' genuine signed answers to the last request, replayed. They sit where the old layout and
    guessed nonces put them. The true hang's verdict stands; every answer counted is the ranks' own."""
    with TCPStoreClient("127.0.0.1", store.port) as c:
        clean = jobwide.from_store(c, session(), [SECRET], timeout=5)
        assert clean["culprit"] == 1 and grouped(clean) == WANT, clean["verdict"]
        last = c.add(wire.dump_seq_key(RUN), 0)
        replay = _answers(c, last)
        old_nonce = next(iter(replay.values()))[0].split("/")[-2]
        fake = {r: dict(taker.with_flight(), text=REAL.replace("train_step", f"elsewhere_{r}")) for r in range(3)}
        ahead = {"op": "ALLREDUCE", "seq": 9, "state": "entered", "file": "/j/hang.py", "line": 22, "pg": "0"}
        recs = {0: dict(ahead, seq=8, state="returned"), 1: ahead, 2: ahead}
        planted = []
        for m in range(last + 1, last + 9):
            for nonce in ("0" * 32, old_nonce, None):
                done = f"rtdebug/{RUN}/dump/{m}/done" if nonce is None else wire.dump_done_key(RUN, m, nonce)
                c.add(done, 3)
                planted.append(done)
                for r in range(3):
                    key = f"rtdebug/{RUN}/dump/{m}/{r}" if nonce is None else wire.answer_key(RUN, m, nonce, r)
                    forged = wire.answer(key, r, m, nonce or old_nonce, fake[r], None, collective=recs[r])
                    c.set(key, replay[r][1] if nonce == old_nonce else forged)
                    planted.append(key)
        try:
            snap = jobwide.from_store(c, session(), [SECRET], timeout=5)
            assert grouped(snap) == WANT and snap["verdict"] == clean["verdict"] and snap["culprit"] == 1
            assert snap["unverified"] == [] and snap["unresponsive"] == []
            assert "elsewhere" not in json.dumps(snap)
        finally:
            for key in planted:
                c.delete_key(key)


def test_answers_are_taken_as_counted_while_a_silent_rank_is_waited_for(store, ranks):
    """Rank 3 never answers, so this request waits its whole timeout; meanwhile another request comes and
    every rank, answering it, deletes its answer to this one (a store keeps one per rank). The answers
    were taken when they were counted, so this request still has ranks 0-2."""
    import threading

    with TCPStoreClient("127.0.0.1", store.port) as c:
        n = c.add(wire.dump_seq_key(RUN), 0) + 1
        got: dict = {}
        slow = threading.Thread(target=lambda: got.update(jobwide.from_store(c, session(4), [SECRET], timeout=4)))
        slow.start()
        with TCPStoreClient("127.0.0.1", store.port) as other:
            deadline = time.monotonic() + 10
            while len([k for k in other.list_keys() if k.startswith(f"rtdebug/{RUN}/dump/{n}/")]) < 4:
                assert time.monotonic() < deadline  # three answers and the count, under request n's nonce
                time.sleep(0.01)
            assert grouped(jobwide.from_store(other, session(), [SECRET], timeout=5)) == WANT
            left = [k for k in other.list_keys() if k.startswith(f"rtdebug/{RUN}/dump/{n}/")]
            assert [k.rsplit("/", 1)[1] for k in left] == ["done"], left  # the answers to n are gone
        slow.join()
    assert grouped(got) == WANT and got["unresponsive"] == [3], got["unresponsive_detail"]


class _Racer(TCPStoreClient):
    """The requester's connection, with a store writer who saw the request's nonce (it is not secret) at
    once: before any rank can, they raise its done count past every rank and write an unsigned answer
    that puts rank 1 with the others."""

    def set(self, key: str, value: bytes | str) -> None:
        if isinstance(value, bytes) and value.startswith(wire.MAGIC):
            n, nonce = int(key.rsplit("/", 1)[1]), json.loads(value.split(b"\n", 1)[1])["nonce"]
            self.add(wire.dump_done_key(RUN, n, nonce), 99)
            key1 = wire.answer_key(RUN, n, nonce, 1)
            rec = {"op": "ALLREDUCE", "seq": 2, "state": "entered", "file": "/j/x.py", "line": 1, "pg": "0"}
            super().set(
                key1, wire.answer(key1, 1, n, nonce, dict(taker.with_flight(), text=REAL), None, collective=rec)
            )
        super().set(key, value)


def test_a_done_count_raised_by_a_racer_does_not_end_the_wait(store, ranks):
    """The count only says when to look: the requester reads on until each rank's signed answer is there
    (rank 1's own overwrites the forged one), so the answer is the true one, all of it verified."""
    with _Racer("127.0.0.1", store.port) as c:
        snap = jobwide.from_store(c, session(), [SECRET], timeout=5)
    assert grouped(snap) == WANT and snap["culprit"] == 1, snap["verdict"]
    assert snap["unverified"] == [] and snap["unresponsive"] == []


class _GivesUp(WatchClient):
    """A rank's client on which the requester gives up (deletes its request, then the done count, as
    ``jobwide.from_store`` does) at one chosen moment: each narrow race of a late answer, made certain."""

    moment = ""
    done = ""

    def set(self, key: str, value: bytes | str) -> None:
        super().set(key, value)
        self._maybe("answer")

    def check(self, keys) -> bool:
        there = super().check(keys)
        self._maybe("check")  # after the rank saw the request still there
        return there

    def _maybe(self, now: str) -> None:
        if now == self.moment:
            for key in (wire.dump_key("late", 1), self.done):
                super().delete_key(key)


@pytest.mark.parametrize("moment", ["", "answer", "check"])
def test_a_late_answer_leaves_no_done_count_behind(store, moment):
    watch = StoreWatch("127.0.0.1", store.port, "late", 4, SECRET, {"hostname": "h"})
    nonce = wire.new_nonce()
    req, done, out = (
        wire.dump_key("late", 1),
        wire.dump_done_key("late", 1, nonce),
        wire.answer_key("late", 1, nonce, 4),
    )
    with TCPStoreClient("127.0.0.1", store.port) as requester, _GivesUp("127.0.0.1", store.port) as rank:
        rank.moment, rank.done = moment, done
        requester.set(req, wire.request(req, 1, nonce, [SECRET]))
        watch.handle(rank, 1)
        assert requester.check([out])  # answered either way
        # counted while the requester waits; after it gave up, nothing of the request is left
        assert requester.check([done]) is (moment == "")
        for key in (req, done, out):
            requester.delete_key(key)
