"""``rtdebug adopt`` on each node of a 2-node job started with plain torchrun (no rtdebug), in network namespaces.

Each node's ranks publish into the job's own store once adopted (c10d rendezvous: the agents' store at
``--rdzv-endpoint``; static rendezvous: ``MASTER_ADDR:MASTER_PORT`` from the ranks' environment), so
``rtdebug ps --store`` from a third "laptop" namespace sees every rank. Node 0 is adopted with the job
secret (``RTDEBUG_JOB_SECRET``), node 1 without: the laptop, holding the secret, sees node 0's rank
verified and node 1's unverified (never picked by default). Detaching publishes each rank's end.
Needs CAP_NET_ADMIN (skips otherwise); see tests/netns.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from rtdebug.inject import jobs
from rtdebug.inject import runner as inject

from support.netns import Hosts, hosts_up
from support.paths import PY, ROOT, SCRIPTS

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

JOB = SCRIPTS / "adopt_job.py"
PORT = 29500
SECRET = "adopt-multinode-test-secret-0123456789"


@pytest.fixture
def hosts(tmp_path):
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    yield from hosts_up(tmp_path)


def plain_node(hosts: Hosts, node: str, control: Path, rdzv: str) -> subprocess.Popen:
    """Plain torchrun (no rtdebug) for ``node``, output to ``<tmp>/<node>.log``; killed by ``hosts.down``."""
    n0, rank = hosts.addr["n0"], 0 if node == "n0" else 1
    if rdzv == "c10d":
        how = [f"--node_rank={rank}", "--rdzv_backend=c10d", f"--rdzv_endpoint={n0}:{PORT}", "--rdzv_id=adoptjob",
               "--rdzv-conf", f"is_host={1 - rank}"]  # fmt: skip
    else:
        how = [f"--node-rank={rank}", "--master-addr", n0, "--master-port", str(PORT)]
    env = {k: v for k, v in hosts.env(node).items() if k != "RTDEBUG_JOB_SECRET"}
    log = open(hosts.tmp / f"{node}.log", "wb")
    cmd = [PY, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", *how,
           "--local-addr", hosts.addr[node], str(JOB), str(control)]  # fmt: skip
    p = subprocess.Popen(["ip", "netns", "exec", hosts.names[node], *cmd], cwd=ROOT, env=env, stdout=log,
                         stderr=subprocess.STDOUT)  # fmt: skip
    hosts.procs.append(p)
    return p


def agent_of(p: subprocess.Popen) -> int:
    proc = psutil.Process(p.pid)  # `ip netns exec` execs torchrun in place
    return proc.pid if jobs.is_agent(proc) else proc.children()[0].pid


def store_view(hosts: Hosts, store: str, secret: bool) -> dict | None:
    env = [] if secret else ["-u", "RTDEBUG_JOB_SECRET"]
    r = hosts.run("lap", "env", *env, PY, "-m", "rtdebug", "ps", "--json", "--store", store)
    if r.returncode != 0:
        return None
    sessions = json.loads(r.stdout)["sessions"]
    return sessions[0] if sessions else None


def wait_ranks(hosts: Hosts, store: str, states: set[str], timeout: float = 120) -> dict:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = store_view(hosts, store, secret=True)
        if last and len(last["ranks"]) == 2 and {r["state"] for r in last["ranks"]} <= states:
            return last
        time.sleep(1)
    raise AssertionError(f"never 2 ranks in {states}: {last}\nn0: {hosts.log('n0')}\nn1: {hosts.log('n1')}")


@pytest.mark.parametrize("rdzv", ["c10d", "static"])
def test_adopted_nodes_publish_into_the_job_store(hosts, tmp_path, monkeypatch, rdzv):
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", SECRET)  # the laptop's (and node 0's adopt's) secret
    control = tmp_path / "control"
    nodes = {h: plain_node(hosts, h, control, rdzv) for h in ("n0", "n1")}
    deadline = time.monotonic() + 180
    while not all("running" in hosts.log(h) for h in nodes):
        assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.values()), hosts.log(
            "n0"
        ) + hosts.log("n1")
        time.sleep(0.5)
    store = f"{hosts.addr['n0']}:{PORT}"
    sids = {}
    for h, secret in (("n0", True), ("n1", False)):
        env = [] if secret else ["-u", "RTDEBUG_JOB_SECRET"]
        adopt = [PY, "-m", "rtdebug", "adopt", str(agent_of(nodes[h])), "--debug-port-base", "31400",
                 "--debug-host", hosts.addr[h], "--debug-allow", hosts.addr["lap"], "--json"]  # fmt: skip
        r = hosts.run(h, "env", *env, *adopt)
        assert r.returncode == 0, r.stderr + hosts.log(h)
        out = json.loads(r.stdout)
        assert out["store"] == store and out["nnodes"] == "2", out
        sids[h] = out["session_id"]

    job = wait_ranks(hosts, store, {"ready"})
    assert job["mode"] == "adopted" and job["source"] == f"store {store}", job
    ranks = {r["rank"]: r for r in job["ranks"]}
    assert {n: r["host"] for n, r in ranks.items()} == {0: hosts.addr["n0"], 1: hosts.addr["n1"]}, ranks
    assert (ranks[0]["verified"], ranks[1]["verified"], job["verified"]) == (True, False, False), job
    assert sorted(n["session_id"] for n in job["nodes"]) == sorted(sids.values())
    bare = store_view(hosts, store, secret=False)  # without the secret nothing is verified
    assert bare is not None and not any(r["verified"] for r in bare["ranks"]), bare

    for h in ("n0", "n1"):  # detach: each rank publishes that it runs on without rtdebug, then stops publishing
        d = hosts.rtdebug(h, "adopt", "--detach", sids[h])
        assert d.returncode == 0 and "the job runs on" in d.stdout, d.stdout + d.stderr
    wait_ranks(hosts, store, {"detached"})
    control.touch()
    for h, p in nodes.items():
        assert p.wait(120) == 0, hosts.log(h)


def test_which_store_an_adopted_job_publishes_to(capsys):
    """c10d rendezvous: the agent's --rdzv-endpoint; static: the ranks' MASTER_ADDR:MASTER_PORT; one node: none."""
    agent = [PY, "-m", "torch.distributed.run", "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=10.1.2.3:29400",
             "train.py", "--rdzv-endpoint", "not-ours:1"]  # fmt: skip
    assert jobs.rdzv_endpoint(agent) == "10.1.2.3:29400"
    assert jobs.rdzv_endpoint(["torchrun", "--rdzv-endpoint", "h:5", "train.py"]) is None  # static backend
    env = {"RANK": "0", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "29500"}
    job = jobs.Job(1, 0.0, "train.py", [jobs.RankProc(2, 0.0, env)])
    assert job.store() == "10.9.9.9:29500" and job.run_id == "none"
    job.rdzv_endpoint = "10.1.2.3:29400"
    assert job.store() == "10.1.2.3:29400"
    job.ranks[0].env["GROUP_WORLD_SIZE"] = "1"
    assert job.store() is None
    from rtdebug import cli

    assert cli.main(["adopt", "--help"]) == 0
    assert "signed with RTDEBUG_JOB_SECRET" in " ".join(capsys.readouterr().out.split())
