"""Step-all done by the ranks, whatever the client: a step over a collective in the stopped rank lets the held
peers come to it (they are held, so it would wait for them forever), and its stop holds them again; VS Code's
Step All Ranks (a step in each rank at once) gives each rank its own step's stop. A plain DAP client per rank,
a real 2-rank torchrun job (gloo). The decisions, one by one: tests/unit/test_allstop_stepping.py."""

from __future__ import annotations

import threading

import pytest

from support.dap import DAPClient
from support.jobs import continue_and_finish, read_ranks, until_debug, wait_ranks
from support.paths import ROOT, marker_line
from support.wait import until

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "scripts" / "allstop_job.py"
ONLY1 = marker_line(SCRIPT, "rank 1 only")
COLLECTIVE = marker_line(SCRIPT, "collective")
SLEEP = marker_line(SCRIPT, "the others are in Python", tags=("",))


@pytest.fixture(autouse=True)
def all_stop_as_a_user_gets_it(monkeypatch) -> None:
    """The suite runs its jobs with ``RTDEBUG_ALL_STOP=0`` (tests/conftest.py); these get the default: on."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)


def _start(job, registry_dir, port_base, tmp_path):
    done = tmp_path / "done"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT), str(done))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    return j, sid, done


def _step_to(c: DAPClient, thread: int, line: int) -> dict:
    c.request("next", threadId=thread)
    s = c.wait_stopped(60)  # a step that waited for a held peer would never come back
    assert s["reason"] == "step"
    assert c.top_frame(s["threadId"])["line"] == line
    return s


def test_a_step_over_the_collective_lets_the_held_rank_with_no_client_come_and_holds_it_again(
    job, registry_dir, port_base, tmp_path
):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    assert s1["reason"] == "breakpoint"
    held = until_debug(registry_dir, sid, 0, "paused", by=1, line=SLEEP)

    thread = s1["threadId"]
    _step_to(c1, thread, ONLY1 + 1)
    _step_to(c1, thread, COLLECTIVE)
    _step_to(c1, thread, COLLECTIVE + 1)  # over the all-reduce: rank 0 came to it
    # and rank 0 is held again by the step's stop, after that collective (a later hold than the first)
    until_debug(registry_dir, sid, 0, "paused", by=1, ok=lambda d: d.get("since", 0) > held["since"])
    assert (read_ranks(registry_dir, sid)[1].get("debug") or {}).get("reason") == "step"
    continue_and_finish(j, registry_dir, sid, c1, thread, done, SCRIPT)
    c1.close()


def test_a_step_over_the_collective_resumes_the_paused_debugger_and_step_all_steps_each_rank(
    job, registry_dir, port_base, tmp_path
):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    until_debug(registry_dir, sid, 0, "running")
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    assert c0.wait_stopped(60)["reason"] == "pause"  # all-stop

    thread = s1["threadId"]
    _step_to(c1, thread, ONLY1 + 1)
    _step_to(c1, thread, COLLECTIVE)
    _step_to(c1, thread, COLLECTIVE + 1)  # rank 0's debugger resumed it, it came to the all-reduce
    c0.event("continued", 60)
    s0 = c0.wait_stopped(60)  # and paused it again when rank 1's step stopped
    assert s0["reason"] == "pause"
    f0 = c0.top_frame(s0["threadId"])
    assert c0.evaluate("dist.get_rank()", f0["id"]) == "0"
    until_debug(registry_dir, sid, 0, "paused", by=1)

    # Step All Ranks: a step in each at once; each stops where its own step ends, neither paused by the other's
    stops: dict[int, dict] = {}

    def step(rank: int, c: DAPClient, tid: int) -> None:
        c.request("next", threadId=tid)
        stops[rank] = c.stopped_for("step", 60)  # a rank paused by the other's step would never get it

    both = [
        threading.Thread(target=step, args=(0, c0, s0["threadId"])),
        threading.Thread(target=step, args=(1, c1, thread)),
    ]
    for t in both:
        t.start()
    for t in both:
        t.join(90)
    assert sorted(stops) == [0, 1]
    continue_and_finish(j, registry_dir, sid, c1, thread, done, SCRIPT)
    c0.event("continued", 60)
    c0.close()
    c1.close()


DDP = ROOT / "tests" / "scripts" / "allstop_ddp.py"
FORWARD = marker_line(DDP, "forward")
DDP_ONLY1 = marker_line(DDP, "rank 1 before its backward")
BACKWARD = marker_line(DDP, "backward")
AFTER = marker_line(DDP, "after backward")


def test_a_step_over_ddps_backward_in_a_paused_rank_lets_the_stopped_rank_come_after_a_while(
    job, registry_dir, port_base, tmp_path
):
    """DDP's gradient all-reduce runs in C++ inside ``backward()``, where no collective wrapper sees it: rank 1,
    paused by rank 0's breakpoint before rank 0's forward, steps over its own backward; the step is not back
    (rank 0 is stopped) until it lets rank 0 go, by time; then rank 0 runs its forward and backward, the
    all-reduce completes, rank 1's step stops after its backward and rank 0 is paused again by it."""
    done = tmp_path / "done"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(DDP), str(done))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach()
    until_debug(registry_dir, sid, 1, "running")
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    c0.request("setBreakpoints", source={"path": str(DDP)}, breakpoints=[{"line": FORWARD, "condition": "step >= 3"}])
    s0 = c0.stopped_for("breakpoint", 120)
    assert c0.top_frame(s0["threadId"])["line"] == FORWARD
    s1 = c1.stopped_for("pause", 60)  # all-stop: rank 1 paused by rank 0's stop (once back from its sleep)
    thread = s1["threadId"]
    line = c1.top_frame(thread)["line"]
    while line != BACKWARD:  # to its backward, a line at a time (none of these waits for rank 0)
        assert line in (DDP_ONLY1 - 1, DDP_ONLY1, FORWARD + 1, FORWARD + 2), line
        c1.request("next", threadId=thread)
        line = c1.top_frame(c1.stopped_for("step", 60)["threadId"])["line"]
    _step_to(c1, thread, AFTER)  # over its backward: back only once rank 0 came to the all-reduce
    c0.event("continued", 60)  # rank 0 was let go, by rank 1's step
    # and paused again by its stop: past its backward (at once, or, had it run into its next all-reduce
    # meanwhile, when that returns: it says so)
    d0 = until(
        lambda: read_ranks(registry_dir, sid)[0].get("debug") or {},
        60,
        "rank 0 held again by rank 1's step",
        ok=lambda d: d.get("state") in ("paused", "pausing") and d.get("by") == 1 and (d.get("line") or 0) >= BACKWARD,
    )
    assert d0["file"] == str(DDP)
    until_debug(registry_dir, sid, 1, "stopped", reason="step", line=AFTER)

    c0.request("setBreakpoints", source={"path": str(DDP)}, breakpoints=[])
    continue_and_finish(j, registry_dir, sid, c1, thread, done, DDP)
    c0.close()
    c1.close()
