"""The rank's dump thread (rtdebug.rank.stacks.dump) and its requester (rtdebug.stacks.collect.ask / Asked).

A child process arms the dump as a rank does; the test is the requester. What it must hold: the answer
is whole, names every thread and ends with the main thread; junk in the FIFO makes no dump; a symlink
planted at the answer's name is replaced, never written through; a forged entry or a forged file at the
FIFO's name gets no write; ``disarm`` leaves no thread and no FIFO behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rtdebug.stacks import collect, contract

from support.paths import ROOT
from support.wait import finishes, stays

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    from rtdebug.rank.stacks import dump

    info = dump.arm(Path(sys.argv[1]), 2)
    threading.Thread(target=time.sleep, args=(600,), name="worker-[x]\\x1b", daemon=True).start()
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        if line.strip() == "hold":  # one long C call that holds the GIL: the dump thread cannot answer
            import ctypes
            print("holding", flush=True)
            ctypes.PyDLL("libc.so.6").sleep(600)
        if line.strip() == "disarm":
            dump.disarm()
            names = sorted(t.name for t in threading.enumerate())
            print(json.dumps(names), flush=True)
""")


@pytest.fixture
def rank(tmp_path):
    d = tmp_path / "session"
    d.mkdir(mode=0o700)
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(d)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "harness")),
    )
    info = json.loads(p.stdout.readline())
    yield d, p, {"rank": 2, "pid": p.pid, "stacks": info}
    p.kill()
    p.wait()


def answer(a: collect.Asked, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = a.read()
        if got is not None:
            return got
        time.sleep(0.005)
    raise AssertionError("no answer")


def test_the_thread_answers_whole_with_names_main_last(rank):
    d, _, entry = rank
    assert entry["stacks"]["request"] == "stacks-2.req" and entry["stacks"]["answer"] == "stacks-2.json"
    got = answer(collect.ask(d, entry))
    assert got["how"] == "thread" and got["complete"]
    names = [t["name"] for t in got["threads"]]
    assert names[-1] == "MainThread" and "rtdebug-dumps-2" in names
    assert "worker-?x??" in names  # brackets and control characters never reach the text
    assert got["threads"][-1]["frames"][0]["function"] == "<module>"
    assert (d / "stacks-2.json").stat().st_mode & 0o777 == 0o600


def test_junk_in_the_fifo_makes_no_dump_and_the_next_nonce_is_answered(rank):
    d, _, entry = rank
    with open(d / "stacks-2.req", "wb", buffering=0) as f:
        f.write(b"\x00" * 3000 + b"\nnot-hex\n" + b"a" * 15 + b"\n")
    # nothing to wait for: the thread must not answer junk (a window in which an answer would show)
    stays(lambda: not (d / "stacks-2.json").exists(), 0.2, "no answer to junk in the FIFO")
    assert answer(collect.ask(d, entry))["how"] == "thread"


def test_a_symlink_planted_at_the_answers_name_is_replaced_not_written_through(rank, tmp_path):
    d, _, entry = rank
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (d / "stacks-2.json").symlink_to(victim)
    answer(collect.ask(d, entry))
    assert victim.read_text() == "precious" and not (d / "stacks-2.json").is_symlink()


def test_forged_entries_and_files_get_no_write(rank, tmp_path):
    d, _, entry = rank
    for forged in ({"request": "../x", "answer": "stacks-2.json"}, {"request": "stacks-2.req", "answer": "/etc/x"}):
        assert collect.ask(d, dict(entry, stacks=dict(entry["stacks"], **forged))) is None
    os.unlink(d / "stacks-2.req")
    (d / "stacks-2.req").write_text("")  # a regular file where the FIFO was
    assert collect.ask(d, entry) is None and (d / "stacks-2.req").read_text() == ""
    os.unlink(d / "stacks-2.req")
    (d / "stacks-2.req").symlink_to(tmp_path / "elsewhere")
    assert collect.ask(d, entry) is None and not (tmp_path / "elsewhere").exists()


def test_a_fifo_nobody_reads_is_no_answer_at_once(tmp_path):
    os.mkfifo(tmp_path / "stacks-2.req", 0o600)
    entry = {"rank": 2, "pid": 1, "stacks": {"request": "stacks-2.req", "answer": "stacks-2.json"}}
    # ENXIO, never a blocked open (which would never return: nobody reads the FIFO)
    assert finishes(lambda: collect.ask(tmp_path, entry), 60, "asking a FIFO nobody reads") is None


def test_disarm_leaves_no_thread_and_no_fifo(rank):
    d, p, _ = rank
    p.stdin.write("disarm\n")
    p.stdin.flush()
    names = json.loads(p.stdout.readline())
    assert not any(n.startswith("rtdebug-dumps") for n in names), names
    assert not (d / "stacks-2.req").exists() and not (d / "stacks-2.json").exists()


def test_a_timeout_too_short_for_the_fallback_signals_no_rank(rank):
    """--timeout 0.1: a rank whose thread cannot answer (a C call holds its GIL) is said to be unresponsive,
    with the timeout that would try the signal-time dump; it is never signalled (its dump file stays empty)."""
    d, p, entry = rank
    p.stdin.write("hold\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "holding"
    unresponsive: dict[int, str] = {}
    dumps, notes = collect.take(d, [entry], 0.1, time.monotonic(), unresponsive)
    assert (dumps, notes) == ({}, [])
    assert unresponsive == {
        2: "its dump thread did not answer within 0.1 s; not signalled (--timeout 1 or more tries the signal-time dump)"
    }
    assert (d / entry["stacks"]["file"]).read_bytes() == b""
    # with time for the fallback, the same rank is signalled and its signal-time dump read
    dumps, notes = collect.take(d, [entry], 3.0, time.monotonic(), unresponsive := {})
    assert (dumps[2]["how"], unresponsive) == ("signal", {})
    assert notes == [{"rank": 2, "reason": "its dump thread did not answer within 1.5 s"}]


def test_fallback_bound_is_half_the_timeout_at_most():
    assert collect.fallback_after(3.0) == 1.5 and collect.fallback_after(1.0) == 0.5
    assert collect.fallback_after(0.99) is None and collect.fallback_after(0.1) is None
    assert contract.request_file(7) == "stacks-7.req" and contract.answer_file(7) == "stacks-7.json"
