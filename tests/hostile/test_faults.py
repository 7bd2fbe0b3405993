"""The fault campaign: real jobs, real faults, and after every trial nothing is left.

For each fault: 0 processes of the session left (launcher, torchrun agent, ranks), 0 of its ports bound,
and the registry says what happened. CI runs one trial of each; ``RTDEBUG_FAULT_TRIALS=20`` runs the full
campaign (the table in docs/reliability.md). Faults that need a stopped rank use ``--wait 0`` and a real DAP
client: rank 0 stops at a breakpoint while rank 1 sits inside the gloo all_reduce (C++) waiting for it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import time

import psutil
import pytest

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import ROOT, marker_line
from support.ports import port_free
from support.procs import alive

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "scripts" / "fault_job.py"
TRIALS = int(os.environ.get("RTDEBUG_FAULT_TRIALS", "1"))
GONE_WITHIN_S = 20.0


class Trial:
    """One job under one fault, with everything needed to check the aftermath."""

    def __init__(self, job, registry_dir, port_base, *harness_args: str, steps: int = 100000) -> None:
        self.registry_dir, self.port_base = registry_dir, port_base
        self.j = job(
            "torchrun",
            "--debug-port-base",
            str(port_base),
            *harness_args,
            "--nproc-per-node",
            "2",
            str(SCRIPT),
            "--steps",
            str(steps),
        )
        self.sid = self.j.session_id()
        self.client: DAPClient | None = None

    def ready(self) -> None:
        self.ranks = wait_ranks(self.registry_dir, self.sid, 2)
        self.session = json.loads((self.registry_dir / self.sid / "session.json").read_text())
        self.pids = sorted(
            {
                self.j.proc.pid,
                self.session["agent_pid"],
                *(r["pid"] for r in self.ranks.values()),
                *(p.pid for p in self.j.descendants()),
            }
        )

    def stop_rank0_at_breakpoint(self) -> dict:
        """Rank 0 stopped at the breakpoint; rank 1 blocked in all_reduce waiting for it."""
        self.ready()
        line = marker_line(SCRIPT, "fault step")
        self.client = DAPClient("127.0.0.1", self.port_base)
        self.client.attach({str(SCRIPT): [line]})
        stopped = self.client.wait_stopped(120)
        assert self.client.top_frame(stopped["threadId"])["line"] == line
        return stopped

    def rank_pid(self, rank: int) -> int:
        return self.ranks[rank]["pid"]

    def assert_clean(self) -> dict:
        """Nothing left, ports free; returns the session entry as `ps --all --json` reports it."""
        deadline = time.monotonic() + GONE_WITHIN_S
        while alive(self.pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = alive(self.pids)
        assert left == [], f"left running: {[psutil.Process(p).cmdline()[:4] for p in left]}\n{self.j.output()[-3000:]}"
        assert port_free(self.port_base) and port_free(self.port_base + 1)
        if self.client is not None:
            self.client.close()
        out = rtdebug("ps", "--all", "--json", env={"RTDEBUG_REGISTRY_DIR": str(self.registry_dir)})
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert [s for s in data["sessions"] if s["session_id"] == self.sid] == []  # not live, not orphaned
        return next(s for s in data["ended"] if s["session_id"] == self.sid)


def _reset(client: DAPClient) -> None:
    """The client vanishes: close with SO_LINGER 0 so the rank sees a TCP reset, not a clean FIN."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.shutdown(socket.SHUT_RD)  # wakes the reader thread (no packet sent) so close() is final
    client._reader.join(10)
    client.sock.close()


def fault_launcher_sigkill(t: Trial) -> None:
    t.stop_rank0_at_breakpoint()
    os.kill(t.j.proc.pid, signal.SIGKILL)
    s = t.assert_clean()
    assert s["state"] == "failed"
    assert s["error"] == f"launcher died without teardown (launcher pid {t.j.proc.pid})"
    assert {r["state"] for r in s["ranks"]} == {"failed"}


def fault_launcher_sighup(t: Trial) -> None:
    t.stop_rank0_at_breakpoint()
    os.kill(t.j.proc.pid, signal.SIGHUP)  # its terminal closed
    t.j.wait(60)
    s = t.assert_clean()
    assert s["state"] == "stopped"
    assert f"rtdebug: session {t.sid} stopped" in t.j.output()


def fault_agent_sigkill(t: Trial) -> None:
    t.stop_rank0_at_breakpoint()
    os.kill(t.session["agent_pid"], signal.SIGKILL)
    assert t.j.wait(60) != 0
    s = t.assert_clean()
    assert s["state"] == "failed"
    assert {r["state"] for r in s["ranks"]} == {"failed"}


def _rank_sigkill(t: Trial) -> None:
    t.ready()
    os.kill(t.rank_pid(1), signal.SIGKILL)
    assert t.j.wait(120) != 0
    s = t.assert_clean()
    assert s["state"] == "failed"
    assert {r["rank"]: r["state"] for r in s["ranks"]}[1] == "failed"


def fault_rank_sigkill(t: Trial) -> None:
    _rank_sigkill(t)


def fault_rank_sigkill_post_mortem(t: Trial) -> None:
    _rank_sigkill(t)


def _client_gone(t: Trial, how) -> None:
    t.stop_rank0_at_breakpoint()
    assert t.client is not None
    how(t.client)
    t.client = None
    assert t.j.wait(120) == 0, t.j.output()[-3000:]  # the rank resumed and the job finished
    s = t.assert_clean()
    assert s["state"] == "exited"
    assert {r["state"] for r in s["ranks"]} == {"exited"}


def fault_client_reset_while_stopped(t: Trial) -> None:
    _client_gone(t, _reset)


def fault_client_disconnect_while_stopped(t: Trial) -> None:
    _client_gone(t, lambda c: c.disconnect())


def fault_stop_while_stopped(t: Trial) -> None:
    t.stop_rank0_at_breakpoint()
    out = rtdebug("stop", "--session", t.sid, env={"RTDEBUG_REGISTRY_DIR": str(t.registry_dir)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"rtdebug: stopped session {t.sid} (")
    s = t.assert_clean()
    assert s["state"] == "stopped"


FAULTS = {  # name -> (check, harness options, steps)
    "launcher SIGKILL": (fault_launcher_sigkill, ["--wait", "0"], 100000),
    "launcher SIGHUP": (fault_launcher_sighup, ["--wait", "0"], 100000),
    "agent SIGKILL": (fault_agent_sigkill, ["--wait", "0"], 100000),
    "rank SIGKILL": (fault_rank_sigkill, [], 100000),
    "rank SIGKILL, --post-mortem": (fault_rank_sigkill_post_mortem, ["--post-mortem"], 100000),
    "client reset while stopped": (fault_client_reset_while_stopped, ["--wait", "0"], 10),
    "client disconnect while stopped": (fault_client_disconnect_while_stopped, ["--wait", "0"], 10),
    "stop while stopped": (fault_stop_while_stopped, ["--wait", "0"], 100000),
}


@pytest.mark.parametrize("trial", range(TRIALS))
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault(fault, trial, job, registry_dir, port_base):
    check, options, steps = FAULTS[fault]
    check(Trial(job, registry_dir, port_base, *options, steps=steps))


@pytest.mark.parametrize("trial", range(TRIALS))
def test_two_launchers_race_for_the_same_ports(trial, job, registry_dir, port_base):
    args = ("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT))
    a, b = job(*args), job(*args)
    deadline = time.monotonic() + 120
    while a.proc.poll() is None and b.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    loser, winner = (a, b) if a.proc.poll() is not None else (b, a)
    assert loser.wait(10) == 1
    assert "rtdebug: error: debug port " in loser.output()
    assert "Traceback" not in loser.output()
    sid = winner.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    pids = [winner.proc.pid, *(r["pid"] for r in ranks.values()), *(p.pid for p in winner.descendants())]
    assert [d.name for d in registry_dir.iterdir() if d.is_dir()] == [sid]  # the loser registered nothing
    out = rtdebug("stop", "--all", env={"RTDEBUG_REGISTRY_DIR": str(registry_dir)})
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + GONE_WITHIN_S
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(pids) == []
    assert port_free(port_base) and port_free(port_base + 1)
