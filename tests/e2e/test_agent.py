"""The torchrun agent is forked from the launcher (one torch import), and behaves as a spawned one would."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from rtdebug.launcher.agent import Agent, cuda_loaded

from support.jobs import wait_ranks
from support.paths import ROOT
from support.sigs import default_dispositions

SCRIPT = ROOT / "tests" / "scripts" / "fault_job.py"


def _fork_exit(code: int, after_s: float) -> int:
    pid = os.fork()
    if pid == 0:
        default_dispositions()  # the test sends it SIGTERM, however the suite was started
        time.sleep(after_s)  # part of the test: a child that exits after_s seconds into the agent's watch
        os._exit(code)
    return pid


def test_agent_is_waited_on_without_being_reaped_until_teardown_says_so():
    """poll/wait (the launcher, hangwatch, the ready announcer) never reap the agent: its pid stays a
    zombie of the launcher, so a tree taken after it exited cannot name a process that reused the pid."""
    a = Agent(_fork_exit(3, 1.0))
    assert a.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        a.wait(timeout=0.1)
    polled: list[int | None] = []
    t = threading.Timer(0.3, lambda: polled.append(a.poll()))
    t.start()  # a poll from another thread while this one blocks in wait() must not steal the status
    assert a.wait() == 3
    t.join()
    assert polled in ([None], [3])
    assert a.poll() == 3 and a.returncode == 3
    assert psutil.Process(a.pid).status() == psutil.STATUS_ZOMBIE  # exited, not reaped: the pid is still ours
    assert not a.send_signal(signal.SIGTERM)  # exited: nothing sent
    assert a.reap() == 3
    assert not psutil.pid_exists(a.pid) or psutil.Process(a.pid).ppid() != os.getpid()
    b = Agent(_fork_exit(0, 30))
    assert b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=10) == -signal.SIGTERM
    assert b.reap() == -signal.SIGTERM
    assert not b.send_signal(signal.SIGTERM)  # reaped: never signalled again (the pid may be reused)
    # the exec'd agent's path: the Popen never reaps behind our back
    c = subprocess.Popen(["sleep", "30"], preexec_fn=default_dispositions)
    ca = Agent(c.pid, c)
    c.terminate()
    assert ca.wait(timeout=10) == -signal.SIGTERM
    assert psutil.Process(c.pid).status() == psutil.STATUS_ZOMBIE
    assert ca.reap() == -signal.SIGTERM and c.returncode == -signal.SIGTERM


def test_no_cuda_in_this_process():
    assert not cuda_loaded()  # CPU test machine; the launcher must not load it either (see below)


@pytest.mark.e2e
def test_torchrun_agent_is_a_fork_of_the_launcher(job, registry_dir, port_base):
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(SCRIPT), "--steps", "100000")
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    session = json.loads((registry_dir / sid / "session.json").read_text())
    launcher, agent = psutil.Process(j.proc.pid), psutil.Process(session["agent_pid"])
    assert agent.ppid() == launcher.pid
    assert agent.cmdline() == launcher.cmdline(), "the agent exec'd a second interpreter (second torch import)"
    assert os.getsid(agent.pid) == agent.pid  # its own session: the launcher alone decides teardown
    assert abs(agent.create_time() - session["agent_create_time"]) < 0.01
    assert not any("libcuda" in m.path for m in launcher.memory_maps())
    for r in ranks.values():
        assert psutil.Process(r["pid"]).ppid() == agent.pid
        env = psutil.Process(r["pid"]).environ()
        assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "7200"  # set without asking whether there is a GPU
        assert env["RTDEBUG_SESSION"] == sid
    j.proc.send_signal(signal.SIGTERM)
    assert j.wait(60) != 0
    assert "stopped" in j.output()
    assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE


REAP_THEN_SIGNAL = """
import os, signal, sys, threading, time
from rtdebug.launcher.agent import Agent
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    time.sleep(30)
    os._exit(0)
a = Agent(pid)
signal.signal(signal.SIGUSR1, lambda *_: a.send_signal(signal.SIGTERM))  # as the launcher forwards one
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()  # comes while reap() blocks
print(a.reap(), flush=True)
"""


def test_a_signal_forwarded_while_the_agent_is_reaped_reaches_it():
    """The launcher forwards a signal to the agent from its handler, on the main thread, which may be blocked
    in ``reap`` holding the agent's lock: a second Ctrl-C or SIGTERM during teardown hung `rtdebug torchrun`."""
    r = subprocess.run([sys.executable, "-c", REAP_THEN_SIGNAL], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == str(-signal.SIGTERM), (r.stdout, r.stderr)
