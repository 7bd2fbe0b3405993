"""Orphans, unreadable entries and concurrent sessions: what readers see when things go wrong."""

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from rtdebug import cli
from rtdebug.registry.entry import SCHEMA_PATH
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune, reserve_session

from support.entries import rank, session
from support.paths import support_env
from support.procs import dead_pid

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def test_orphaned_session_listed_and_marked(tmp_path):
    """Launcher gone, a rank process still alive (this test process stands in for it)."""
    reg = Registry(tmp_path)
    entry = session("orph")
    entry["launcher_pid"] = dead_pid()
    reserve_session(reg, entry)
    reg.write_rank(rank("orph", r=0, state="ready"))  # pid = this live process
    reg.write_rank(rank("orph", r=1, pid=dead_pid(), state="ready"))
    live = prune(reg)
    assert [s["session_id"] for s in live] == ["orph"]
    assert live[0]["state"] == "orphaned"
    assert live[0]["error"].startswith(f"launcher pid {entry['launcher_pid']} is gone")
    assert {r["rank"]: r["state"] for r in live[0]["ranks"]} == {0: "orphaned", 1: "failed"}
    for p in (tmp_path / "orph").glob("*.json"):
        jsonschema.validate(json.loads(p.read_text()), SCHEMA)


def test_orphan_keeps_its_ports_reserved(tmp_path):
    reg = Registry(tmp_path)
    entry = session("orph", ports=(7000, 7001))
    entry["launcher_pid"] = dead_pid()
    reserve_session(reg, entry)
    reg.write_rank(rank("orph", r=0, state="ready"))
    from rtdebug.common.errors import HarnessError

    with pytest.raises(HarnessError, match="debug port 7001 is reserved by session orph"):
        reserve_session(reg, session("new", ports=(7001, 7002)))


DAMAGE = {
    "empty": b"",
    "truncated": b'{"schema_version": 1, "kind": "rank", "sess',
    "garbage": b"\x00\xffnot json",
    "wrong shape": b'{"schema_version": 1, "kind": "rank", "rank": "zero"}',
    "a list": b"[1, 2]",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_rank_entry_never_crashes_readers(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(tmp_path))
    reg = Registry(tmp_path)
    reserve_session(reg, session("s1"))
    reg.write_rank(rank("s1", r=0))
    bad = tmp_path / "s1" / "rank-1.json"
    bad.write_bytes(DAMAGE[damage])
    assert cli.main(["ps"]) == 0
    out = capsys.readouterr()
    assert f"rtdebug: warning: unreadable registry entry {bad}:" in out.err
    assert len([line for line in out.err.splitlines() if str(bad) in line]) == 1
    assert "session s1" in out.out
    assert cli.main(["ps", "--json"]) == 0
    assert str(bad) in json.loads(capsys.readouterr().out)["unreadable"]
    assert cli.main(["attach", "--rank", "1", "--session", "s1", "--timeout", "30"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rtdebug: error: rank 1's registry entry is unreadable ({bad}: ")
    assert cli.main(["attach", "--rank", "0", "--session", "s1", "--json"]) == 0


def test_damaged_session_entry_is_named_not_fatal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(tmp_path))
    (tmp_path / "broken").mkdir(parents=True)
    (tmp_path / "broken" / "session.json").write_bytes(b"{")
    assert cli.main(["ps"]) == 0
    out = capsys.readouterr()
    assert "no live rtdebug sessions" in out.out
    assert f"unreadable registry entry {tmp_path / 'broken' / 'session.json'}: not valid JSON" in out.err
    assert cli.main(["stop", "--all"]) == 0


RACER = r"""
import os, sys, time
from rtdebug.common.errors import HarnessError
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import reserve_session
from support.entries import session
base = int(sys.argv[1])
entry = session("s%d" % os.getpid(), pid=os.getpid(), ports=(base, base + 1))
try:
    reserve_session(Registry({reg!r}), entry)
    print("OK", flush=True)
except HarnessError as exc:
    print("CLASH", exc, flush=True)
sys.stdin.read()  # stay alive (a live launcher) until the test has checked the reservations
"""


def test_fifty_sessions_at_once_never_double_book(tmp_path):
    code = RACER.format(reg=str(tmp_path / "reg"))
    n = int(os.environ.get("RTDEBUG_RACERS", "50"))
    # 50 launchers asking for 10 overlapping ranges: (base, base+1) with bases 8000..8009 overlap pairwise
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(8000 + i % 10)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=support_env(),
        )
        for i in range(n)
    ]
    try:
        results = [p.stdout.readline().strip() for p in procs]
        won = [r for r in results if r == "OK"]
        assert all(r == "OK" or r.startswith("CLASH debug port 80") for r in results), results
        reg = Registry(tmp_path / "reg")
        live = prune(reg)
        assert len(live) == len(won)
        ports = [p for s in live for p in s["ports"]]
        assert len(ports) == len(set(ports))  # never double-booked
        for r in results:  # every refusal names a port that a winner really holds
            if r != "OK":
                assert int(r.split("debug port ")[1].split()[0]) in ports, r
        assert len(won) >= 4  # a maximal set of disjoint (b, b+1) ranges out of 10 has at least 4
        for f in (tmp_path / "reg").rglob("*"):
            assert not f.name.startswith(".tmp-")
            if f.suffix == ".json":
                jsonschema.validate(json.loads(f.read_text()), SCHEMA)
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
