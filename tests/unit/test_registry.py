import json
import os

import jsonschema
import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import is_alive, process_create_time
from rtdebug.registry.entry import SCHEMA_PATH
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune, reserve_session

from support.entries import rank, session
from support.procs import dead_pid

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def test_entries_validate_against_schema(tmp_path):
    reg = Registry(tmp_path)
    reg.ensure()
    reserve_session(reg, session())
    reg.write_rank(rank())
    for p in tmp_path.rglob("*.json"):
        jsonschema.validate(json.loads(p.read_text()), SCHEMA)
    bad = dict(rank(), state="sleeping")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_permissions(tmp_path):
    reg = Registry(tmp_path / "r")
    reg.ensure()
    reserve_session(reg, session())
    assert oct((tmp_path / "r").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "r" / "s1" / "session.json").stat().st_mode & 0o777) == "0o600"


def test_overlapping_ports_refused(tmp_path):
    reg = Registry(tmp_path)
    reserve_session(reg, session("a", ports=(6000, 6001)))
    with pytest.raises(HarnessError) as e:
        reserve_session(reg, session("b", ports=(6001, 6002)))
    assert "debug port 6001 is reserved by session a" in str(e.value)
    reserve_session(reg, session("c", ports=(6002, 6003)))  # disjoint is fine
    assert [s["session_id"] for s in prune(reg)] == ["a", "c"]


def test_stale_session_marked_failed_then_removed_after_retention(tmp_path, monkeypatch):
    from rtdebug.registry import liveness

    reg = Registry(tmp_path)
    pid = dead_pid()
    entry = session("gone")
    entry["launcher_pid"] = pid
    reserve_session(reg, entry)
    assert prune(reg) == []
    kept = reg.read_session("gone")  # the registry says what happened
    assert kept["state"] == "failed"
    assert kept["error"] == f"launcher died without teardown (launcher pid {pid})"
    monkeypatch.setattr(liveness, "RETENTION_S", -1.0)  # every ended session is past it: no wait for the clock
    prune(reg)
    assert not (tmp_path / "gone").exists()


def test_reused_pid_is_not_alive(tmp_path):
    ct = process_create_time(os.getpid())
    assert is_alive(os.getpid(), ct)
    assert not is_alive(os.getpid(), ct - 100)  # same pid, different process start: reused
    reg = Registry(tmp_path)
    entry = session("reused")
    entry["launcher_create_time"] = ct - 100
    reserve_session(reg, entry)
    assert prune(reg) == []


def test_vanished_rank_marked_failed_and_ended_rank_kept(tmp_path):
    reg = Registry(tmp_path)
    reserve_session(reg, session())
    reg.write_rank(rank(r=0, pid=dead_pid(), state="ready"))
    reg.write_rank(rank(r=1, pid=dead_pid(), state="exited"))
    live = prune(reg)
    states = {r["rank"]: (r["state"], r["error"]) for r in live[0]["ranks"]}
    assert states == {0: ("failed", "process gone"), 1: ("exited", None)}


def test_find_session_errors(tmp_path):
    from rtdebug.views.api import Views
    from rtdebug.views.local import LocalView

    reg = Registry(tmp_path)
    views = Views([LocalView(reg)])
    with pytest.raises(HarnessError, match="no live rtdebug session"):
        views.find_session(None)
    reserve_session(reg, session("a"))
    with pytest.raises(HarnessError, match="no live session 'b'"):
        views.find_session("b")
    assert views.find_session(None)["session_id"] == "a"


def test_reading_never_writes_and_prune_is_the_one_step_that_does(tmp_path):
    """live_sessions/ended_sessions decide in memory; only prune brings the files in line."""
    from rtdebug.registry.liveness import ended_sessions, live_sessions

    reg = Registry(tmp_path)
    reg.ensure()
    gone = session("gone", ports=(7000, 7001))
    gone["launcher_pid"] = dead_pid()
    for entry in (session(), gone):
        reg.write_new_session(entry)
    reg.write_rank(rank(r=0, pid=dead_pid(), state="ready"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    live = live_sessions(reg)
    assert [r["state"] for r in live[0]["ranks"]] == ["failed"]  # decided ...
    assert [s["state"] for s in ended_sessions(reg)] == ["failed"]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before  # ... but nothing written
    prune(reg)
    assert reg.ranks("s1")[0]["state"] == "failed" and reg.read_session("gone")["state"] == "failed"


def test_attach_times_out_for_a_rank_that_never_registers(tmp_path, monkeypatch, capsys):
    from rtdebug import cli

    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(tmp_path))
    reserve_session(Registry(tmp_path), session("s1"))
    assert cli.main(["attach", "--rank", "0", "--session", "s1", "--timeout", "0.3"]) == 1
    assert capsys.readouterr().err.strip() == "rtdebug: error: timed out after 0.3s waiting for rank 0 of session s1"
