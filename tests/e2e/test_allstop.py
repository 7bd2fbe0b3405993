"""The ranks' own debugger behaviour, whatever the client: a DAP terminate never ends one rank, each rank's
entry says whether it is stopped, paused or running, and all-stop (one rank stops: the others pause; continue
in one continues all) is done by the ranks. A plain DAP client per rank, a real 2-rank torchrun job (gloo)."""

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


def _start(job, registry_dir, port_base, tmp_path, *env_pairs: str):
    done = tmp_path / "done"
    env = dict(p.split("=", 1) for p in env_pairs)
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT), str(done), env=env)
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    return j, sid, done


def _debug(registry_dir, sid, rank) -> dict:
    return read_ranks(registry_dir, sid)[rank].get("debug") or {}


def _console(c: DAPClient, timeout: float = 30) -> str:
    return str(c.event("output", timeout).get("output"))


def test_terminate_or_disconnect_with_terminate_debuggee_never_ends_a_rank(job, registry_dir, port_base, tmp_path):
    """nvim-dap's :DapTerminate sends ``terminate``, VS Code's Stop a ``disconnect`` with ``terminateDebuggee``:
    either becomes a detach, the client reads why in its console, and the job runs on to exit 0."""
    j, sid, done = _start(job, registry_dir, port_base, tmp_path, "RTDEBUG_ALL_STOP=0")
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
