"""``rtdebug connect HEAD --ray-address``: a Ray Train run's workers on two nodes, debugged from a laptop.

The hosts and their sshd's are ``support.sshhosts``'s (the laptop reaches ``login`` alone). A real Ray
cluster runs inside them: its head in ``n0``, a second raylet in ``n1`` (``ray start`` in each namespace, on
free ports and the test's own temp dir, ended by its own pids), one ``rtd_slot`` each, so the run's two
workers land one per node. The driver is ``rtdebug run --ray-address`` in ``n0``. From the laptop,
``rtdebug connect node0 --jump login --ray-address <n0>:<gcs>`` finds the workers in the cluster's KV (through
``rtdebug ps`` on node0), forwards each through a link to its own node and the GCS through node0's; a real DAP
client then stops in the worker on ``n1`` and reads its rank and node, and ``stacks`` from the laptop shows
both workers. SIGKILL leaves nothing; the run's end ends ``connect``.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from support.paths import PY, SCRIPTS, marker_line
from support.ports import free_port_base
from support.raycluster import AUTH_MODE, RayCluster
from support.sshhosts import Cluster, cluster_up, connect_args, one_line_error, ps_json, ssh_processes
from support.sshhosts import start_connect as connect_from_laptop
from support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.netns, pytest.mark.ray_cluster]

SCRIPT = SCRIPTS / "ray_workers.py"
PROBE = SCRIPTS / "dap_probe.py"
STEP_LINE = marker_line(SCRIPT, "step")
WHO = 'f\'{__import__("ray").train.get_context().get_world_rank()}|{__import__("ray").util.get_node_ip_address()}\''
# nothing listens there: a port the GCS's client used may be left in TIME_WAIT (hence SO_REUSEADDR), not bound
LISTEN_ALL = (
    "import socket,sys\nfor p in sys.argv[1:]:\n s=socket.socket()\n"
    " s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',int(p)));s.listen();s.close()"
)
NODES = "from ray._raylet import GcsClient\nimport sys\ng = GcsClient(address=sys.argv[1])\n" \
        "print(sum(i.state == 0 for i in g.get_all_node_info(timeout=10).values()))"  # fmt: skip


@pytest.fixture
def hosts(tmp_path):
    yield from cluster_up(tmp_path, node_env={"RAY_AUTH_MODE": AUTH_MODE}, default_route=True)


@pytest.fixture
def ray(hosts, monkeypatch):
    """Head in n0, a raylet in n1, each at its namespace's address. The raylets' environment reaches the
    workers: gloo on eth0 (every namespace has the same host name, which resolves to loopback)."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("RAY_AUTH_MODE", AUTH_MODE)  # (the laptop's clients of the forwarded GCS too)
    r = RayCluster()
    try:
        for attempt in range(2):  # on a loaded machine a `ray start` can time out (and ends its cluster)
            try:
                start_ray(r, hosts)
                break
            except RuntimeError:
                if attempt == 1:
                    raise
                r = RayCluster()
        until(lambda: hosts.run("n0", PY, "-c", NODES, str(r.address)).stdout.strip(), 60, "both raylets alive",
              ok=lambda n: n == "2", every=0.5)  # fmt: skip
        yield r
    finally:
        r.stop()
        assert not r.processes()


def start_ray(r: RayCluster, hosts: Cluster) -> None:
    for h in ("n0", "n1"):
        r.prefix = ["ip", "netns", "exec", hosts.names[h]]
        r.extra = ["--node-ip-address", hosts.addr[h]]
        if h == "n0":
            r.start_head(num_cpus=1, resources='{"rtd_slot": 1}')
        else:
            r.add_node(num_cpus=1, resources='{"rtd_slot": 1}')


def ray_run(c: Cluster, address: str) -> dict | None:
    """The run as node0's ``ps --ray-address`` lists it, once both workers are ready."""
    r = c.rtdebug("n0", "ps", "--json", "--ray-address", address)
    for s in json.loads(r.stdout)["sessions"] if r.returncode == 0 else []:
        if s["mode"] == "ray" and sum(x["state"] in ("ready", "attached") for x in s["ranks"]) == 2:
            return s
    return None


def probe(c: Cluster, rank: int) -> str:
    """A real DAP client on the laptop: stops rank ``rank`` at the step breakpoint, reads WHO, lets it go."""
    a = c.rtdebug("lap", "attach", "--rank", str(rank), "--json", "--timeout", "60")
    assert a.returncode == 0, a.stderr
    where = json.loads(a.stdout)
    assert where["host"] == "127.0.0.1", where
    argv = ["ip", "netns", "exec", c.names["lap"], PY, str(PROBE), where["host"], str(where["port"]), str(SCRIPT),
            str(STEP_LINE), WHO]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, env=c.env("lap"), timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["line"] == STEP_LINE, got
    return str(got["value"]).strip("'\"")


def test_connect_a_ray_train_run_through_a_jump_host(hosts, ray, tmp_path):
    c, address = hosts, str(ray.address)
    assert address.startswith(c.addr["n0"] + ":")
    # bad input, one line each, nothing left: no Ray there; a cluster with no rtdebug-armed run; two jobs named
    err = one_line_error(c, "node0", "--jump", "login", "--ray-address", f"{c.addr['n0']}:1")
    assert f"node0 cannot read the Ray cluster at {c.addr['n0']}:1: cannot reach" in err, err
    err = one_line_error(c, "node0", "--jump", "login", "--ray-address", address)
    assert f"no rtdebug-armed Ray Train run in the Ray cluster at {address}" in err, err
    r = c.rtdebug("lap", *connect_args(c, "node0", "--ray-address", address, "--store", address))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "rtdebug: error: --ray-address and --store name two different jobs: give one"
    ], r

    until_file, port = tmp_path / "finish", free_port_base(16)
    driver = c.start("n0", ["run", "--port", str(port), "--ray-address", address, str(SCRIPT), "--slot", "rtd_slot",
                            "--until-file", str(until_file), "--step-sleep", "0.2"],
                     RAY_DEDUP_LOGS="0", RTDEBUG_TEST_STORAGE=str(tmp_path / "results"))  # fmt: skip
    run = until(lambda: ray_run(c, address), 240, "two ready workers in the cluster's KV", every=1,
                context=lambda: c.log("n0"))  # fmt: skip
    node_ip = {x["rank"]: x["node_ip"] for x in run["ranks"]}
    assert sorted(node_ip.values()) == sorted([c.addr["n0"], c.addr["n1"]]), run["ranks"]
    far = next(n for n, ip in node_ip.items() if ip == c.addr["n1"])

    conn = connect_from_laptop(c, "--ray-address", address)
    (s,) = ps_json(c, "lap")["sessions"]  # the connected run only: the forwarded GCS adds no second listing
    assert s["mode"] == "connected" and s["verified"] is True and s["session_id"] == run["session_id"], s
    assert s["ray_address"].startswith("127.0.0.1:"), s
    ranks = {x["rank"]: x for x in s["ranks"]}
    assert sorted(ranks) == [0, 1] and all(x["host"] == "127.0.0.1" for x in ranks.values()), ranks
    nodes = {n: x["tunnel"]["node"] for n, x in ranks.items()}
    assert nodes == {n: (c.addr["n1"] if n == far else "node0") for n in ranks}, nodes  # each through its node
    assert not list(c.lap_home.rglob("*secret*")) and not list((c.tmp / "registry-lap").rglob("job.secret"))

    # a real DAP client on the laptop stops in the worker on node 1 and reads its world rank and node
    assert probe(c, far) == f"{far}|{c.addr['n1']}"

    # stacks from the laptop: both workers, through the forwarded GCS, signed with the secret in memory
    st = c.rtdebug("lap", "stacks", "--json", "--timeout", "20")
    assert st.returncode == 0, st.stderr
    snap = json.loads(st.stdout)
    assert sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1] and snap["unverified"] == [], snap
    text = c.rtdebug("lap", "stacks", "--timeout", "20")
    assert text.returncode == 0 and "ray_workers.py" in text.stdout, text.stderr

    # SIGKILL of connect: no ssh left, no port bound (the workers' and the GCS's), no live session here
    ports = [x["port"] for x in ranks.values()] + [int(s["ray_address"].rsplit(":", 1)[1])]
    assert ssh_processes(conn.pid)
    conn.send_signal(signal.SIGKILL)
    conn.wait(timeout=30)
    until(lambda: ssh_processes(conn.pid), 30, "no ssh process of connect left", ok=lambda ps: not ps)
    free = c.run("lap", PY, "-c", LISTEN_ALL, *map(str, ports))
    assert free.returncode == 0, free.stderr + c.run("lap", "ss", "-tan").stdout
    assert ps_json(c, "lap")["sessions"] == []
    assert ray_run(c, address) is not None  # the run goes on

    # connected again when the run ends: connect sees it, closes everything, exits 0, leaves no entry
    conn = connect_from_laptop(c, "--ray-address", address)
    until_file.write_text("done")
    assert conn.wait(timeout=180) == 0, (c.tmp / "connect.log").read_text()
    assert "has ended on node0" in (c.tmp / "connect.log").read_text()
    assert not ssh_processes(conn.pid) and not [p for p in Path(c.tmp / "registry-lap").iterdir() if p.is_dir()]
    assert driver.wait(timeout=180) == 0, c.log("n0")
