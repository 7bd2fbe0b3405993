"""The ranks' own debugger behaviour, whatever the client: a DAP terminate never ends one rank, each rank's
entry says whether it is stopped, paused or running, and all-stop (one rank stops: the others pause; continue
in one continues all) is done by the ranks. A plain DAP client per rank, a real 2-rank torchrun job (gloo)."""

from __future__ import annotations

import os

import pytest

from support.dap import DAPClient
from support.jobs import ps_debug, read_ranks, until_debug, wait_ranks
from support.paths import ROOT, marker_line
from support.wait import until

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "scripts" / "allstop_job.py"
ONLY1 = marker_line(SCRIPT, "rank 1 only")
COLLECTIVE = marker_line(SCRIPT, "collective")
SLEEP = marker_line(SCRIPT, "the others are in Python", tags=("",))  # where rank 0 is when rank 1 stops


@pytest.fixture(autouse=True)
def all_stop_as_a_user_gets_it(monkeypatch) -> None:
    """The suite runs its jobs with ``RTDEBUG_ALL_STOP=0`` (tests/conftest.py); these get the default: on."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)


def _start(job, registry_dir, port_base, tmp_path, *flags: str, n: int = 2):
    done = tmp_path / "done"
    ours = ["--debug-port-base", str(port_base), "--nproc-per-node", str(n), *flags]
    j = job("torchrun", *ours, str(SCRIPT), str(done))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, n)
    return j, sid, done


def _debug(registry_dir, sid, rank) -> dict:
    return read_ranks(registry_dir, sid)[rank].get("debug") or {}


def _console(c: DAPClient, timeout: float = 30) -> str:
    return str(c.event("output", timeout).get("output"))


def test_terminate_or_disconnect_with_terminate_debuggee_never_ends_a_rank(job, registry_dir, port_base, tmp_path):
    """nvim-dap's :DapTerminate sends ``terminate``, VS Code's Stop a ``disconnect`` with ``terminateDebuggee``:
    either becomes a detach, the client reads why in its console, and the job runs on to exit 0."""
    j, sid, done = _start(job, registry_dir, port_base, tmp_path, "--no-all-stop")  # rank 0 runs on, no client
    assert [r.get("all_stop") for r in read_ranks(registry_dir, sid).values()] == [False, False]
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    stopped = c1.wait_stopped(120)
    assert c1.top_frame(stopped["threadId"])["line"] == ONLY1
    seq = c1.send("terminate")
    assert "rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`" in _console(c1)
    c1.response(seq)
    c1.event("terminated")
    c1.disconnect()

    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    seq = c0.send("disconnect", terminateDebuggee=True)
    assert "rtdebug: rank 0 keeps running; to end the whole job: `rtdebug stop`" in _console(c0)
    c0.response(seq)
    c0.close()

    until(lambda: all(r["state"] == "ready" for r in read_ranks(registry_dir, sid).values()), 60, "both ranks detached")
    done.write_text("")
    assert j.wait(120) == 0
    out = j.output()
    assert "rank 0 ended after" in out and "rank 1 ended after" in out


def test_a_breakpoint_in_rank_1_pauses_rank_0s_debugger_and_continue_in_one_continues_all(
    job, registry_dir, port_base, tmp_path
):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    assert [r.get("all_stop") for r in read_ranks(registry_dir, sid).values()] == [True, True]  # clients read it
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    until_debug(registry_dir, sid, 0, "running")
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    assert s1["reason"] == "breakpoint"
    s0 = c0.wait_stopped(60)  # all-stop: rank 0 is paused by the ranks, no client asked
    assert s0["reason"] == "pause"
    f0 = c0.top_frame(s0["threadId"])
    assert c0.evaluate("dist.get_rank()", f0["id"]) == "0"
    until_debug(registry_dir, sid, 1, "stopped", line=ONLY1, reason="breakpoint")
    until_debug(registry_dir, sid, 0, "paused", by=1)
    text, debug = ps_debug(registry_dir)
    assert f"stopped at allstop_job.py:{ONLY1} (breakpoint)" in text
    assert "paused (all-stop, by rank 1)" in text
    assert debug[1]["file"] == str(SCRIPT) and debug[0]["line"] == f0["line"]

    c1.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
    c1.continue_(s1["threadId"])  # continue in one rank continues all
    c0.event("continued", 60)
    until_debug(registry_dir, sid, 0, "running")
    until_debug(registry_dir, sid, 1, "running")
    assert "attached, running" in ps_debug(registry_dir)[0]
    done.write_text("")
    assert j.wait(120) == 0
    c0.close()
    c1.close()


def test_a_rank_with_no_client_is_held_where_it_runs_and_let_go_when_the_stopped_rank_terminates(
    job, registry_dir, port_base, tmp_path
):
    """Rank 0 sleeps (a native call) when rank 1 stops: it is held as soon as the sleep returns, before its next
    collective (``rtdebug.rank.nativehold``; a rank in DDP's all-reduce: ``tests/e2e/test_allstop_native.py``)."""
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    until_debug(registry_dir, sid, 0, "paused", by=1, line=SLEEP)
    assert f"rtdebug: rank 0 paused at allstop_job.py:{SLEEP}: rank 1 stopped (all-stop)" in (
        j.wait_output("rank 0 paused at")
    )
    text, _ = ps_debug(registry_dir)
    assert f"paused (all-stop, by rank 1) at allstop_job.py:{SLEEP}" in text

    # a client that attaches to the held rank finds it suspended there, at the user's line
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    s0 = c0.wait_stopped(60)
    f0 = c0.top_frame(s0["threadId"])
    assert f0["line"] == SLEEP
    assert c0.evaluate("dist.get_rank()", f0["id"]) == "0"
    c0.disconnect()  # its client leaves; rank 1 is still stopped

    # terminate in the stopped rank: a detach; its client gone, the rank it paused goes on, and the job ends well
    assert s1["reason"] == "breakpoint"
    seq = c1.send("terminate")
    assert "rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`" in _console(c1)
    c1.response(seq)
    c1.event("terminated")
    c1.disconnect()
    until_debug(registry_dir, sid, 0, "running")
    until_debug(registry_dir, sid, 1, "running")
    done.write_text("")
    assert j.wait(120) == 0


@pytest.mark.skipif(os.environ.get("RTDEBUG_FULL") != "1", reason="RTDEBUG_FULL=1: all-stop on 4 ranks")
def test_four_ranks_one_stops_every_other_is_held_and_a_continue_lets_all_go(job, registry_dir, port_base, tmp_path):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path, n=4)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    for rank in (0, 2, 3):
        until_debug(registry_dir, sid, rank, "paused", by=1, line=SLEEP)
    text, _ = ps_debug(registry_dir)
    assert text.count(f"paused (all-stop, by rank 1) at allstop_job.py:{SLEEP}") == 3
    c1.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
    c1.continue_(s1["threadId"])
    for rank in (0, 2, 3):
        until_debug(registry_dir, sid, rank, "running")
    done.write_text("")
    assert j.wait(120) == 0
    c1.close()
