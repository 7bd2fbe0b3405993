"""All-stop with a rank blocked in C++: a real 2-rank DDP job (CPU, gloo) whose gradient all-reduce runs inside
``loss.backward()``, issued from C++ where the collective wrapper never sees it. Rank 1 stops at a breakpoint
before its backward (a plain DAP client on rank 1 only) while rank 0 waits in that all-reduce; rank 0's entry
says ``pausing`` with its line, and once rank 1 steps over its backward, rank 0's returns and rank 0 is held
right there: with no client (``rtdebug.rank.nativehold``), and with one (pydevd's pause)."""

from __future__ import annotations

import pytest

from support.dap import DAPClient
from support.jobs import continue_and_finish, ps_debug, until_debug, wait_ranks
from support.paths import ROOT, marker_line
from support.wait import until

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "scripts" / "allstop_ddp.py"
ONLY1 = marker_line(SCRIPT, "rank 1 before its backward")
BACKWARD = marker_line(SCRIPT, "backward")
AFTER = marker_line(SCRIPT, "after backward")
NAME = SCRIPT.name


def _start(job, registry_dir, port_base, tmp_path):
    done = tmp_path / "done"
    ours = ["--debug-port-base", str(port_base), "--nproc-per-node", "2"]
    j = job("torchrun", *ours, str(SCRIPT), str(done), env={"RTDEBUG_ALL_STOP": "1"})  # the suite's default: off
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    return j, sid, done


def _rank1_stops_and_steps_over_its_backward(c1: DAPClient) -> dict:
    """Rank 1 at its breakpoint, then over its backward: its share of the all-reduce lets rank 0's return."""
    s1 = c1.wait_stopped(120)
    assert s1["reason"] == "breakpoint"
    assert c1.top_frame(s1["threadId"])["line"] == ONLY1
    return s1


def _step(c1: DAPClient, thread: int, line: int) -> None:
    c1.request("next", threadId=thread)
    s = c1.wait_stopped(60)
    assert c1.top_frame(s["threadId"])["line"] == line


def test_a_rank_with_no_client_in_ddps_all_reduce_is_pausing_then_held_when_its_backward_returns(
    job, registry_dir, port_base, tmp_path
):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = _rank1_stops_and_steps_over_its_backward(c1)
    until_debug(registry_dir, sid, 0, "pausing", by=1, line=BACKWARD)
    text, debug = ps_debug(registry_dir)
    assert f"pausing (in a native call at {NAME}:{BACKWARD}, by rank 1)" in text
    assert debug[0]["file"] == str(SCRIPT)

    _step(c1, s1["threadId"], BACKWARD)
    _step(c1, s1["threadId"], AFTER)  # rank 1's backward ran: rank 0's all-reduce completes too
    until_debug(registry_dir, sid, 0, "paused", by=1, line=BACKWARD, reason="all-stop")
    assert f"rtdebug: rank 0 paused at {NAME}:{BACKWARD}: rank 1 stopped (all-stop)" in j.wait_output(
        f"rank 0 paused at {NAME}"
    )
    text, _ = ps_debug(registry_dir)
    assert f"paused (all-stop, by rank 1) at {NAME}:{BACKWARD}" in text
    assert f"stopped at {NAME}:{AFTER} (step)" in text

    # a client that attaches to the held rank finds it there, its backward returned: the stack proves where
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    s0 = c0.wait_stopped(60)
    f0 = c0.top_frame(s0["threadId"])
    assert f0["line"] == BACKWARD
    assert c0.evaluate("dist.get_rank()", f0["id"]) == "0"
    assert c0.evaluate("model.module.weight.grad is not None", f0["id"]) == "True"  # its backward is done
    c0.disconnect()  # its client leaves; rank 1 is still stopped: rank 0 stays held, and says so again
    held = f"rtdebug: rank 0 paused at {NAME}:{BACKWARD}: rank 1 stopped (all-stop)"
    until(lambda: j.output().count(held), 60, "rank 0 held again with no client", ok=lambda n: n >= 2)
    until_debug(registry_dir, sid, 0, "paused", by=1, line=BACKWARD)

    continue_and_finish(j, registry_dir, sid, c1, s1["threadId"], done, SCRIPT)
    c1.close()


def test_a_rank_with_a_client_in_ddps_all_reduce_is_paused_by_its_debugger_when_its_backward_returns(
    job, registry_dir, port_base, tmp_path
):
    j, sid, done = _start(job, registry_dir, port_base, tmp_path)
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    until_debug(registry_dir, sid, 0, "running")
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = _rank1_stops_and_steps_over_its_backward(c1)
    until_debug(registry_dir, sid, 0, "pausing", by=1, line=BACKWARD)
    assert f"pausing (in a native call at {NAME}:{BACKWARD}, by rank 1)" in ps_debug(registry_dir)[0]

    _step(c1, s1["threadId"], BACKWARD)
    _step(c1, s1["threadId"], AFTER)
    s0 = c0.wait_stopped(60)  # pydevd's pause lands once rank 0's backward returns
    assert s0["reason"] == "pause"
    f0 = c0.top_frame(s0["threadId"])
    assert f0["line"] in (BACKWARD, AFTER), f0
    assert c0.evaluate("model.module.weight.grad is not None", f0["id"]) == "True"
    until_debug(registry_dir, sid, 0, "paused", by=1, line=f0["line"])

    continue_and_finish(j, registry_dir, sid, c1, s1["threadId"], done, SCRIPT)
    c0.event("continued", 60)
    c0.close()
    c1.close()
