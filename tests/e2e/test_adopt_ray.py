"""``rtdebug adopt PID`` of a Ray Train worker: a TorchTrainer run started WITHOUT rtdebug on a Ray cluster this
module starts (one node, its own temp dir and ports; ended by its own pids, never ``ray stop``).

Ray sets a worker's rank in the process, not in its environment: adopt asks the process (its train context)
first, then gives it the endpoint on base + world rank. ``adopt --list`` lists the workers (kind "ray"); a
real DAP client stops the adopted worker in the train function where the train context says rank 1;
``stop`` detaches it and the run finishes without error. A process that only looks like a worker (its
title) but has no train context is refused in one line, untouched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from rtdebug.inject import runner as inject

from support.dap import DAPClient
from support.jobs import read_ranks, rtdebug
from support.paths import PY, SCRIPTS, marker_line
from support.procs import kill_tree
from support.raycluster import AUTH_MODE, RayCluster

pytestmark = [pytest.mark.ray_cluster, pytest.mark.e2e]
SCRIPT = SCRIPTS / "ray_workers.py"
RANK_EXPR = "__import__('ray').train.get_context().get_world_rank()"


@pytest.fixture(scope="module")
def cluster():
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    c = RayCluster()
    try:
        c.start_head(num_cpus=2)
        yield c
    finally:
        c.stop()
        assert not c.processes()


def _plain_env(cluster: RayCluster, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTDEBUG_")}
    env.update(RAY_ADDRESS=cluster.address or "", RAY_AUTH_MODE=AUTH_MODE, RAY_DEDUP_LOGS="0", PYTHONUNBUFFERED="1")
    env.update(RTDEBUG_TEST_STORAGE=str(tmp_path / "results"))
    return env


def _listed(pid: int) -> dict | None:
    r = rtdebug("adopt", "--list", "--json")
    assert r.returncode == 0, r.stderr
    return next((j for j in json.loads(r.stdout) if j["pid"] == pid), None)


def test_adopt_a_ray_train_worker_by_pid_and_stop_in_train_fn(cluster, registry_dir, port_base, tmp_path):
    until, log = tmp_path / "until", tmp_path / "driver.log"
    args = [PY, str(SCRIPT), "--workers", "2", "--steps", "1", "--step-sleep", "0.2", "--until-file", str(until)]
    with open(log, "wb") as f:
        driver = subprocess.Popen(args, env=_plain_env(cluster, tmp_path), stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline, pid = time.monotonic() + 240, None
        while pid is None:
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            m = re.search(r"worker rank 1 step \d+ pid (\d+)", log.read_text(errors="replace"))
            pid = int(m.group(1)) if m else None
            time.sleep(0.5)
        entry = _listed(pid)
        assert entry is not None and (entry["kind"], entry["ranks"], entry["adopted_session"]) == ("ray", [None], None)

        r = rtdebug("adopt", str(pid), "--debug-port-base", str(port_base))
        assert r.returncode == 0 and f"adopted Ray Train worker pid {pid}" in r.stdout, r.stdout + r.stderr
        sid = next(p.name for p in registry_dir.iterdir() if (p / "session.json").exists())
        ranks = read_ranks(registry_dir, sid)
        assert list(ranks) == [1] and (ranks[1]["pid"], ranks[1]["port"]) == (pid, port_base + 1), ranks
        assert ranks[1]["world_size"] == 2 and ranks[1]["state"] == "ready"
        entry = _listed(pid)
        assert entry is not None and (entry["ranks"], entry["adopted_session"]) == ([1], sid), entry

        line = marker_line(SCRIPT, "step")
        c = DAPClient("127.0.0.1", port_base + 1)
        try:
            c.attach({str(SCRIPT): [line]})
            stopped = c.wait_stopped(120)
            frame = c.top_frame(stopped["threadId"])
            assert (frame["name"], frame["line"]) == ("train_fn", line), frame
            assert c.evaluate(RANK_EXPR, frame["id"]) == "1"
            c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
            c.continue_(stopped["threadId"])
        finally:
            c.disconnect()
        d = rtdebug("stop", "--session", sid)
        assert d.returncode == 0 and f"session {sid} detached from 1 ranks" in d.stdout, d.stdout + d.stderr
        until.touch()
        assert driver.wait(180) == 0, log.read_text()[-3000:]
        assert "ray run finished: error=None" in log.read_text()
    finally:
        if driver.poll() is None:
            kill_tree(driver)


def test_a_worker_lookalike_without_train_context_is_refused(registry_dir, port_base):
    """Its title says RayTrainWorker, but no Ray Train run set a context in it: one line, nothing changed."""
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    import site

    paths = [*site.getsitepackages(), str(SCRIPTS.parents[1] / "harness")]  # argv[0] no longer finds the venv
    code = "import ray.train, time; print('up', flush=True); time.sleep(120)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    fake = subprocess.Popen(
        ["bash", "-c", f'exec -a ray::RayTrainWorker {PY} -c "{code}"'], stdout=subprocess.PIPE, env=env
    )
    try:
        assert fake.stdout is not None and fake.stdout.readline() == b"up\n"
        r = rtdebug("adopt", str(fake.pid), "--debug-port-base", str(port_base))
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"Ray worker pid {fake.pid} has no Ray Train context to adopt" in r.stderr, r.stderr
        assert "the job was not touched" in r.stderr and not any(registry_dir.glob("*/session.json"))
        assert fake.poll() is None
    finally:
        kill_tree(fake)
