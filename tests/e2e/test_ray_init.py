"""Ray Train workers when the script's own ``ray.init()`` starts the cluster (no --ray-address, no RAY_ADDRESS).

The run records the cluster's GCS address in its local session entry (``rtdebug.rank.ray_worker``), so a
plain `rtdebug ps` from a separate process finds the workers; a real DAP client stops in each worker's
train function; when the script ends, Ray's own shutdown ends the cluster it started and nothing is left:
no process of that cluster, no port bound, no live entry.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from support import wait
from support.dap import DAPClient, stop_in_each_rank
from support.jobs import rtdebug
from support.paths import SCRIPTS, marker_line
from support.ports import port_free
from support.raycluster import AUTH_MODE, RayCluster

pytestmark = [pytest.mark.ray_cluster, pytest.mark.e2e]
SCRIPT = SCRIPTS / "ray_workers.py"
STEP_LINE = marker_line(SCRIPT, "step")
RANK_EXPR = "__import__('ray').train.get_context().get_world_rank()"


@pytest.fixture
def script_cluster():
    """The temp dir the script's ray.init() will use; whatever Ray left there is ended by its pids."""
    c = RayCluster()  # not started: only its temp dir and its process finder are used
    env = {k: os.environ.pop(k) for k in ("RAY_ADDRESS",) if k in os.environ}
    try:
        yield c
    finally:
        leftover = c.processes()
        c.stop()
        os.environ.update(env)
        assert not leftover, f"the script's cluster outlived it: {[p.pid for p in leftover]}"


def _ps(registry_dir) -> list[dict]:
    env = {"RTDEBUG_REGISTRY_DIR": str(registry_dir), "RAY_AUTH_MODE": AUTH_MODE}
    r = rtdebug("ps", "--json", env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["sessions"]


def _ready_ray_session(j, registry_dir) -> dict:
    """The run's Ray session once both workers are ready, found by a plain `ps` in a separate process."""
    deadline, s = time.monotonic() + 240, None
    while s is None and time.monotonic() < deadline:  # no address given: ps finds the cluster by itself
        for x in _ps(registry_dir):
            if x["mode"] == "ray" and len([r for r in x["ranks"] if r["state"] == "ready"]) == 2:
                s = x
        assert j.proc.poll() is None, j.output()[-4000:]
        time.sleep(1)
    assert s is not None, j.output()[-4000:]
    return s


def _start(job, script_cluster, port_base, tmp_path, *extra: str):
    return job(
        "run",
        "--port",
        str(port_base),
        str(SCRIPT),
        "--start-ray",
        script_cluster.temp_dir,
        "--until-file",
        str(tmp_path / "finish"),
        *extra,
        env={"RAY_AUTH_MODE": AUTH_MODE, "RAY_DEDUP_LOGS": "0", "RTDEBUG_TEST_STORAGE": str(tmp_path / "results")},
    )


def test_workers_of_a_cluster_the_script_started(script_cluster, job, registry_dir, port_base, tmp_path):
    until, gate = tmp_path / "finish", tmp_path / "go"
    j = _start(job, script_cluster, port_base, tmp_path, "--gate-file", str(gate), "--step-sleep", "0.2")
    sid = j.session_id()
    s = _ready_ray_session(j, registry_dir)
    local = json.loads((registry_dir / sid / "session.json").read_text())
    assert s["session_id"].startswith(sid + "-ray") and s["source"] == f"ray {local['ray_address']}"
    ranks = {r["rank"]: r for r in s["ranks"]}
    assert sorted(ranks) == [0, 1]
    for n, r in ranks.items():
        assert (r["host"], r["port"]) == ("127.0.0.1", port_base + 1 + n)
        assert r["lazy"] is True and r["debugpy_imported"] is False

    clients = {n: DAPClient(r["host"], r["port"]) for n, r in ranks.items()}
    for c in clients.values():
        c.attach({str(SCRIPT): [STEP_LINE]})
    gate.write_text("go")
    stop_in_each_rank(clients, str(SCRIPT), STEP_LINE, RANK_EXPR)
    for c in clients.values():
        c.disconnect()
    until.write_text("done")
    assert j.wait(240) == 0, j.output()[-6000:]
    assert "ray run finished: error=None" in j.output()
    for port in (port_base, port_base + 1, port_base + 2):
        assert port_free(port)
    # Ray's shutdown of the cluster it started runs at the driver's exit
    wait.until(lambda: not script_cluster.processes(), 60, "the cluster the script started is gone", every=0.5)
    assert _ps(registry_dir) == []  # no live session left, and the dead cluster's address is not asked


def test_stop_ends_a_ray_driver_quietly_by_its_signal(script_cluster, job, registry_dir, port_base, tmp_path):
    """`rtdebug stop` of a `rtdebug run` whose script's ray.init() started the cluster: ray.init() would make
    SIGTERM a SystemExit that aborted the driver (exit 134); rtdebug keeps its own handler, so the driver
    records `stopped` and ends by SIGTERM, and nothing of the cluster is left (the fixture checks)."""
    j = _start(job, script_cluster, port_base, tmp_path, "--step-sleep", "0.2")
    sid = j.session_id()
    _ready_ray_session(j, registry_dir)
    r = rtdebug("stop", "--session", sid, env={"RTDEBUG_REGISTRY_DIR": str(registry_dir)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert j.wait(120) == -signal.SIGTERM, j.output()[-4000:]
    assert f"rtdebug: session {sid} stopped (signal {int(signal.SIGTERM)})" in j.output()
    assert json.loads((registry_dir / sid / "session.json").read_text())["state"] == "stopped"
    for port in (port_base, port_base + 1, port_base + 2):
        assert port_free(port)
