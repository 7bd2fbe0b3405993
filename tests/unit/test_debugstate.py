"""The rank's debug state as ``ps`` shows it (forged fields included), and all-stop's board."""

from __future__ import annotations

from rtdebug.rank.allstop import RUNNING, STOPPED, Board
from rtdebug.registry.table import debug_state, rank_state


def _rank(state: str, debug_state_: str, **debug) -> dict:
    return {"state": state, "debug": {"state": debug_state_, "reason": None, "file": None, "line": None, "by": None,
                                      "since": 1.0, **debug}}  # fmt: skip


def test_each_debug_state_reads_as_ps_shows_it():
    stopped = _rank("attached", "stopped", reason="breakpoint", file="/w/train.py", line=41)
    assert rank_state(stopped) == "stopped at train.py:41 (breakpoint)"
    paused = _rank("ready", "paused", reason="all-stop", file="/w/train.py", line=50, by=1)
    assert rank_state(paused) == "paused (all-stop, by rank 1) at train.py:50"
    pausing = _rank("ready", "pausing", reason="all-stop", file="/w/train.py", line=41, by=1)
    assert rank_state(pausing) == "pausing (in a native call at train.py:41, by rank 1)"
    assert rank_state(_rank("attached", "pausing", by=1)) == "pausing (all-stop, by rank 1)"  # no line: no claim
    assert rank_state(_rank("attached", "running")) == "attached, running"
    assert rank_state(dict(_rank("ready", "running"), attach_count=1)) == "ready (detached)"
    assert rank_state(_rank("exited", "stopped")) == "exited"  # an ended rank is ended


def test_a_forged_debug_field_is_shown_bounded_and_printable_or_not_at_all():
    assert debug_state({"debug": {"state": "lying"}}) == ""
    assert debug_state({"debug": "stopped"}) == ""
    forged = {"state": "stopped", "file": "/x/\x1b[2Jevil.py" + "a" * 500, "line": 3, "reason": "\x07" * 99}
    text = debug_state({"debug": forged})
    assert "\x1b" not in text and "\x07" not in text and len(text) < 160
    assert debug_state({"debug": {"state": "paused", "by": True}}) == "paused (all-stop)"


def test_the_board_is_shared_through_its_file(tmp_path):
    a, b = Board(tmp_path / "allstop.bin"), Board(tmp_path / "allstop.bin")
    assert b.read() == (0, RUNNING, 0)
    a.publish(STOPPED, 3)
    assert b.read() == (1, STOPPED, 3)
    b.publish(RUNNING, 0)
    assert a.read() == (2, RUNNING, 0)
    assert (tmp_path / "allstop.bin").stat().st_mode & 0o777 == 0o600
