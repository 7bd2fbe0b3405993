"""All-stop in ranks that ``rtdebug adopt`` put rtdebug into (``rtdebug.rank.adopted``): a plain 2-rank torchrun
job (gloo, no rtdebug) adopted, a client on rank 1 only: its breakpoint pauses rank 0 (no client), its continue
lets rank 0 go. A detach, even with rank 1 stopped and rank 0 held, lets both run on and leaves nothing of
all-stop in either rank (no FIFO, thread, mmap or fd); a second adoption has all-stop again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.adoptjobs import JOB, adopt, fds, foreign_threads, left_open, listening
from support.dap import DAPClient
from support.jobs import rtdebug
from support.paths import marker_line
from support.wait import until

pytestmark = pytest.mark.e2e
LINE = marker_line(JOB, "step")


@pytest.fixture(autouse=True)
def all_stop_as_a_user_gets_it(monkeypatch) -> None:
    """The suite runs its jobs with ``RTDEBUG_ALL_STOP=0`` (tests/conftest.py); this job gets the default: on."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)


def _adopt(agent: int, base: int, registry_dir: Path, known: set[str]) -> str:
    r = adopt(str(agent), "--debug-port-base", str(base))
    assert r.returncode == 0, r.stdout + r.stderr
    (sid,) = {p.name for p in registry_dir.iterdir() if (p / "session.json").exists()} - known
    return sid


def _debug(sid: str) -> dict[int, dict]:
    ps = rtdebug("ps", "--json")
    assert ps.returncode == 0, ps.stderr
    (session,) = [s for s in json.loads(ps.stdout)["sessions"] if s["session_id"] == sid]
    return {r["rank"]: r.get("debug") or {} for r in session["ranks"]}


def _until_rank0(sid: str, states: tuple[str, ...], **fields) -> dict:
    def ok(d: dict[int, dict]) -> bool:
        return d[0].get("state") in states and all(d[0].get(k) == v for k, v in fields.items())

    return until(lambda: _debug(sid), 60, f"rank 0 {states} {fields}", ok=ok)[0]


def _allstop_parts(pid: int) -> list[str]:
    """What of all-stop ``pid`` has: a mapping of ``allstop.bin``, an fd on its FIFO."""
    with open(f"/proc/{pid}/maps") as f:
        maps = [line.split()[-1] for line in f if "allstop.bin" in line]
    return maps + [f for f in fds(pid) if "allstop-" in f]


def _stop_rank1(base: int, sid: str) -> tuple[DAPClient, int]:
    """A client on rank 1 only stops it at the step's breakpoint; rank 0 (no client) is held by all-stop."""
    c = DAPClient("127.0.0.1", base + 1)
    c.attach({str(JOB): [LINE]})
    thread = c.wait_stopped(60)["threadId"]
    held = _until_rank0(sid, ("pausing", "paused"), by=1, reason="all-stop")  # in all_reduce (C++), or in Python
    assert held["file"] == str(JOB), held
    return c, thread


def test_adopted_ranks_all_stop_and_detach_lets_go_of_them_leaving_nothing(plain, registry_dir, port_base):
    job = plain()
    pids = job.wait_running()
    agent = job.agent().pid
    fds_before = {p: fds(p) for p in pids}
    sid = _adopt(agent, port_base, registry_dir, set())
    fifos = sorted(p.name for p in (registry_dir / sid).glob("allstop-*.fifo"))
    assert fifos == ["allstop-0.fifo", "allstop-1.fifo"], fifos
    assert all(_allstop_parts(p) for p in pids)  # what the detach must take away (so that this test can fail)

    c, thread = _stop_rank1(port_base, sid)
    c.request("setBreakpoints", source={"path": str(JOB)}, breakpoints=[])
    c.continue_(thread)  # continue in rank 1 lets rank 0 go
    _until_rank0(sid, ("running",))
    c.disconnect()

    c, _ = _stop_rank1(port_base, sid)  # stopped again, and rank 0 held, when the detach comes
    try:
        d = rtdebug("adopt", "--detach", sid)
        assert d.returncode == 0 and "the job runs on" in d.stdout, d.stdout + d.stderr
    finally:
        c.close()
    assert not list((registry_dir / sid).glob("allstop-*.fifo"))
    assert {p: _allstop_parts(p) for p in pids} == {p: [] for p in pids}
    deadline = time.monotonic() + 10  # pydevd's threads end on their own once told to
    while (left := foreign_threads(agent)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left  # no wake-up thread, no watcher: nothing of rtdebug runs in the ranks
    # no socket left either: pydevd's ends of both clients (the first one left before the second came)
    assert {p: left_open(p, fds_before[p], registry_dir) for p in pids} == {p: [] for p in pids}

    again = _adopt(agent, port_base + 4, registry_dir, {sid})  # a second adoption: all-stop again
    c, _ = _stop_rank1(port_base + 4, again)
    try:
        d = rtdebug("adopt", "--detach", again)
        assert d.returncode == 0, d.stdout + d.stderr
    finally:
        c.close()
    assert not listening(port_base + 4) and {p: _allstop_parts(p) for p in pids} == {p: [] for p in pids}
    assert job.finish() == 0, job.output()  # both ranks ran on, to the end
    assert job.output().count("(collectives wrapped: False)") == 2, job.output()
    assert "paused" not in job.output().split("detached; nothing of rtdebug runs here now")[-1]
