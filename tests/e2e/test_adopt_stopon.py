"""``rtdebug adopt --stop-on``: a plain torchrun job (3 ranks, gloo, DDP), started without rtdebug, gets the
conditions while it runs, and every rank takes them at the same step -- the injection reaches the ranks
one by one, so a rank that checked alone could enter a collective of ours its peers never enter.

The job is ``tests/scripts/adopt_stopon_job.py`` under ``python -m torch.distributed.run``. Injection is by
ptrace (the tests skip where this machine cannot ptrace).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_stopon import stops

from rtdebug.inject import jobs
from rtdebug.inject import runner as inject

from support.dap import DAPClient
from support.jobs import rtdebug
from support.paths import PY, SCRIPTS
from support.procs import kill_tree
from support.wait import until

pytestmark = pytest.mark.e2e
JOB = SCRIPTS / "adopt_stopon_job.py"
OFF = "__import__('rtdebug.rank.stopon.arm', fromlist=['_']).configure('')"


@pytest.fixture
def plain3(tmp_path):
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    control, log = tmp_path / "control", tmp_path / "job.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RTDEBUG_SESSION", None)
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3", str(JOB), str(control)],
            cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    until(lambda: log.read_text().count("running") >= 3, 120, "3 ranks running", context=log.read_text)
    yield proc, control, log
    if proc.poll() is None:
        kill_tree(proc)


def _agent(proc: subprocess.Popen) -> int:
    return jobs.job_of(__import__("psutil").Process(proc.pid)).agent_pid


def _session(registry_dir: Path) -> str:
    return next(p.name for p in registry_dir.iterdir() if (p / "session.json").exists())


def _attach(port_base: int) -> dict[int, tuple[DAPClient, dict]]:
    out = {}
    for r in range(3):
        c = DAPClient("127.0.0.1", port_base + r)
        c.attach()
        out[r] = (c, c.wait_stopped(60))
    return out


def _finish(clients, proc, control, log, registry_dir) -> None:
    """Off again in every rank (evaluated where it stopped, as VS Code does), continue, end the job."""
    for c, ev in clients.values():
        frame = c.top_frame(ev["threadId"])
        assert "--stop-on is off" in c.evaluate(OFF, frame["id"])
    for c, ev in clients.values():
        c.continue_(ev["threadId"])
        c.close()
    control.touch()
    assert proc.wait(120) == 0, log.read_text()[-3000:]
    assert log.read_text().count("done after") == 3


def test_adopt_with_stop_on_nonfinite_stops_every_rank_at_the_nan_origin_named(plain3, registry_dir, port_base):
    proc, control, log = plain3
    out = rtdebug("adopt", str(_agent(proc)), "--debug-port-base", str(port_base), "--stop-on", "nonfinite")
    assert out.returncode == 0, out.stderr
    assert "rtdebug: 3 ranks stop on nonfinite from the next optimizer step they reach together" in out.stdout
    sid = _session(registry_dir)
    Path(str(control) + ".nan").touch()
    got = stops(sid, 3)
    assert got[1]["origin"] is True and got[1]["reason"].startswith("non-finite loss and grad of 0.weight")
    for r in (0, 2):
        assert got[r]["reason"].startswith("non-finite grad at step ") and "(origin: rank 1)" in got[r]["reason"]
    assert len({s["step"] for s in got.values()}) == 1, got
    clients = _attach(port_base)
    steps = set()
    for c, ev in clients.values():
        frame = c.top_frame(ev["threadId"])
        assert frame["source"]["path"] == str(JOB)
        steps.add(c.evaluate("step", frame["id"]))
        assert c.evaluate("bool(torch.isfinite(net[0].weight).all())", frame["id"]) == "True"  # no step yet
    assert len(steps) == 1, steps  # the same step of the job on every rank
    _finish(clients, proc, control, log, registry_dir)


def test_stop_on_set_on_an_adopted_job_stops_every_rank_at_the_same_job_step(plain3, registry_dir, port_base):
    """``step=N`` counts from the step the ranks took the change at together: if each rank counted from
    its own injection, they would stop at different steps of the job, and the ones stopped first would
    hold the others in a collective."""
    proc, control, log = plain3
    assert rtdebug("adopt", str(_agent(proc)), "--debug-port-base", str(port_base)).returncode == 0
    sid = _session(registry_dir)
    out = rtdebug("adopt", str(_agent(proc)), "--stop-on", "step=20")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "rtdebug: 3 ranks stop on step=20 from the next optimizer step they reach together " \
        "(steps counted from there)"  # fmt: skip
    got = stops(sid, 3)
    want = {"kind": "step", "reason": "before optimizer step 20", "origin": None, "step": 20}
    assert all(s == want for s in got.values()), got
    clients = _attach(port_base)
    steps = {c.evaluate("step", c.top_frame(ev["threadId"])["id"]) for c, ev in clients.values()}
    assert len(steps) == 1, steps
    _finish(clients, proc, control, log, registry_dir)


def test_a_bad_condition_is_one_usage_line_and_nothing_is_touched(plain3, registry_dir, port_base):
    proc, _, _ = plain3
    out = rtdebug("adopt", str(_agent(proc)), "--debug-port-base", str(port_base), "--stop-on", "nan")
    assert out.returncode == 2 and out.stderr.strip().startswith("rtdebug: error: --stop-on: unknown condition 'nan'")
    assert not (registry_dir.exists() and any(registry_dir.iterdir()))
    assert proc.poll() is None  # the job runs on, untouched (the fixture ends it)
