"""The job's all-stop setting, as a debugger changes it while the job runs: what the VS Code extension does
with its ``rtdebug.allStop`` off (one ``evaluate`` with no frame of ``rtdebug.rank.api.all_stop(False)`` in one
rank). A plain DAP client per rank, a real 2-rank torchrun job (gloo), all-stop on by default."""

from __future__ import annotations

import pytest

from support.dap import DAPClient
from support.jobs import read_ranks, wait_ranks
from support.paths import ROOT, marker_line
from support.wait import until

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "scripts" / "allstop_job.py"
ONLY1 = marker_line(SCRIPT, "rank 1 only")
COLLECTIVE = marker_line(SCRIPT, "collective")
OFF = "__import__('rtdebug.rank.api', fromlist=['_']).all_stop(False)"


def test_a_debugger_turns_the_jobs_all_stop_off_in_a_running_rank_with_no_stopped_frame(
    job, registry_dir, port_base, tmp_path, monkeypatch
):
    """Rank 0 runs (no stopped frame) when its client turns all-stop off; then rank 1's breakpoint pauses nobody,
    and rank 0 reaches its own breakpoint by itself."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)  # the default (tests/conftest.py turns it off)
    done = tmp_path / "done"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT), str(done))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    assert [r.get("all_stop") for r in read_ranks(registry_dir, sid).values()] == [True, True]
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    c0.request("evaluate", expression=OFF, context="repl")
    until(lambda: read_ranks(registry_dir, sid)[0].get("all_stop"), 30, "rank 0's entry: off", ok=lambda v: v is False)
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    s1 = c1.wait_stopped(120)
    assert s1["reason"] == "breakpoint"
    c0.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[{"line": COLLECTIVE}])
    s0 = c0.wait_stopped(60)  # its own breakpoint, not an all-stop pause: rank 0 ran on
    assert s0["reason"] == "breakpoint" and c0.top_frame(s0["threadId"])["line"] == COLLECTIVE
    for c, s in ((c0, s0), (c1, s1)):
        c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
        c.continue_(s["threadId"])
    done.write_text("")
    assert j.wait(120) == 0
    c0.close()
    c1.close()


def test_a_rank_paused_in_its_debugger_runs_on_when_the_stopped_ranks_client_leaves(
    job, registry_dir, port_base, tmp_path, monkeypatch
):
    """All-stop on (the default): rank 1 stops, rank 0 is paused in its own client; rank 1's client disconnects
    without continuing. Nobody is left to continue rank 0: the ranks continue it, and the job ends well."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)
    done = tmp_path / "done"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT), str(done))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    c0 = DAPClient("127.0.0.1", port_base)
    c0.attach()
    c1 = DAPClient("127.0.0.1", port_base + 1)
    c1.attach({str(SCRIPT): [ONLY1]})
    assert c1.wait_stopped(120)["reason"] == "breakpoint"
    assert c0.wait_stopped(60)["reason"] == "pause"  # paused by the ranks
    c1.disconnect()
    c0.event("continued", 60)  # its client did nothing: the ranks let it go
    until(
        lambda: read_ranks(registry_dir, sid)[0].get("debug") or {},
        60,
        "rank 0 running",
        ok=lambda d: d.get("state") == "running",
    )
    done.write_text("")
    assert j.wait(120) == 0
    c0.close()
