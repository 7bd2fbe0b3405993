"""Multi-node torchrun on separate hosts: network namespaces on a private bridge, c10d rendezvous.

Each node runs the guide's c10d command through ``rtdebug torchrun`` in its own
namespace with its own registry directory (separate hosts share no files), so
every cross-node fact the test sees comes through the job's c10d store. From a
third "laptop" namespace, ``rtdebug ps/attach --store`` find every rank and a
real DAP client stops each one at a breakpoint. Every node and the laptop share the job
secret (``RTDEBUG_JOB_SECRET``), so the store's entries are verified; without it the laptop
lists them as unverified and never picks them by default. Needs CAP_NET_ADMIN (skips
otherwise). CI runs 2 nodes x 1 rank; ``RTDEBUG_FULL=1`` adds 2 nodes x 2 ranks
stopped from the laptop through the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rtdebug.registry import c10d

from support.netns import Hosts, hosts_up
from support.paths import EXAMPLES, PY, SCRIPTS, marker_line
from support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

SCRIPT = SCRIPTS / "multinode_train.py"
PROBE = SCRIPTS / "dap_probe.py"
RDZV_PORT = 29500
FULL = os.environ.get("RTDEBUG_FULL") == "1"


JOB_SECRET = "multinode-test-job-secret-0123456789"


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", JOB_SECRET)  # every node and the laptop (Hosts.env copies it)
    yield from hosts_up(tmp_path)


def node_args(hosts: Hosts, node: str, script: list[str], nproc: int = 1, static: bool = False) -> list[str]:
    """The guide's c10d command (or static rendezvous), through rtdebug. Both namespaces share the
    machine's hostname, so torchrun is told which node hosts the store and which address is its own."""
    n0 = hosts.addr["n0"]
    if static:
        rdzv = f"--node-rank={0 if node == 'n0' else 1} --master-addr {n0} --master-port {RDZV_PORT}"
    else:
        rdzv = (
            f"--node_rank={0 if node == 'n0' else 1} --rdzv_backend=c10d --rdzv_endpoint={n0}:{RDZV_PORT} "
            f"--rdzv_id=job --rdzv-conf is_host={1 if node == 'n0' else 0}"
        )
    harness = f"--debug-host auto --debug-allow {hosts.addr['lap']}"
    return [*harness.split(), "--nnodes=2", f"--nproc-per-node={nproc}", *rdzv.split(),
            "--local-addr", hosts.addr[node], *script]  # fmt: skip


FLOOD = """
import collections, socket, sys
n, failed = 0, collections.Counter()
for _ in range(2000):
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
        n += 1
    except OSError as exc:
        failed[type(exc).__name__ + ': ' + str(exc)] += 1
print(n)
print(dict(failed), file=sys.stderr)
"""
KNOCK = """
import socket, sys
body = b'{"seq": 1, "type": "request", "command": "initialize", "arguments": {"adapterID": "debugpy"}}'
try:  # a refused connection is reset, which may reach us while we still connect or send
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
    s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
    print("closed" if s.recv(1000) == b"" else "answered")
except ConnectionResetError:
    print("reset")
"""


TICK = """
import sys
from rtdebug.registry import c10d
from rtdebug.registry.tcpstore import TCPStoreClient
host, port = sys.argv[1].rsplit(":", 1)
with TCPStoreClient(host, int(port)) as c:
    print(c.add(c10d.tick_key("job"), 0))
"""


def job_tick(hosts: Hosts, store: str) -> int:
    """The job's logical clock (every rank's heartbeat advances it by one), read from the laptop."""
    r = hosts.run("lap", PY, "-c", TICK, store, timeout=60)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def ps_json(hosts: Hosts, h: str, *extra: str) -> dict:
    r = hosts.rtdebug(h, "ps", "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_view(hosts: Hosts, h: str, n: int, *extra: str, timeout: float = 240) -> dict:
    """The one session of the job as seen from ``h``, once ``n`` ranks are ready."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        r = hosts.rtdebug(h, "ps", "--json", *extra)
        if r.returncode != 0:  # the store is not up before the rendezvous host's agent starts
            assert "rtdebug: error: cannot reach the job store at" in r.stderr, r.stderr
            last = r.stderr
            time.sleep(1)
            continue
        last = json.loads(r.stdout)
        for s in last["sessions"]:
            if len([r for r in s["ranks"] if r["state"] == "ready"]) >= n:
                return s
        time.sleep(1)
    raise AssertionError(f"{n} ready ranks never seen from {h}: {last}\n{hosts.trouble()}")


def attach_and_stop(hosts: Hosts, store: str, rank: int, *extra: str) -> tuple[dict, str]:
    a = hosts.rtdebug("lap", "attach", "--rank", str(rank), "--store", store, "--json", "--timeout", "60", *extra)
    assert a.returncode == 0, a.stderr
    where = json.loads(a.stdout)
    expr = "f'{dist.get_rank()}|{HOST}|{os.environ[\"NODE_ADDR\"]}'"
    p = hosts.run(
        "lap",
        PY,
        str(PROBE),
        where["host"],
        str(where["port"]),
        str(SCRIPT),
        str(marker_line(SCRIPT, "multinode step")),
        expr,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    probe = json.loads(p.stdout.strip().splitlines()[-1])
    assert probe["verified"] and probe["line"] == marker_line(SCRIPT, "multinode step")
    return where, probe["value"].strip("'\"")


def launcher_session(hosts: Hosts, h: str) -> str:
    line = next(ln for ln in hosts.log(h, tail=1 << 30).splitlines() if ln.startswith("rtdebug: session "))
    return line.split()[2]


def wait_empty(hosts: Hosts, names: list[str], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for h in names for p in hosts.pids(h)]
        if not left:
            return []
        time.sleep(0.5)
    return left


def start_job(hosts: Hosts, tmp_path: Path, nproc: int) -> tuple[subprocess.Popen, subprocess.Popen, str, dict]:
    """Both nodes started; the job as the laptop sees it once every rank is ready."""
    stop = tmp_path / "stop"
    n0 = hosts.start("n0", ["torchrun", *node_args(hosts, "n0", [str(SCRIPT), str(stop)], nproc)])
    n1 = hosts.start("n1", ["torchrun", *node_args(hosts, "n1", [str(SCRIPT), str(stop)], nproc)])
    store = f"{hosts.addr['n0']}:{RDZV_PORT}"
    return n0, n1, store, wait_view(hosts, "lap", 2 * nproc, "--store", store)


def test_two_hosts_one_view_attach_every_rank_and_lose_a_node(hosts, tmp_path):
    n0, n1, store, job = start_job(hosts, tmp_path, 1)

    # the laptop (no registry of its own) sees every rank of the job through the store, verified by the secret
    assert job["source"] == f"store {store}" and job["store"] == store
    assert job["verified"] is True and all(r["verified"] for r in job["ranks"])
    # without the secret the same entries are unverified: listed, never picked by default
    bare = ["env", "-u", "RTDEBUG_JOB_SECRET", PY, "-m", "rtdebug"]
    unverified = json.loads(hosts.run("lap", *bare, "ps", "--json", "--store", store).stdout)["sessions"][0]
    assert unverified["verified"] is False
    refused = hosts.run("lap", *bare, "attach", "--rank", "0", "--store", store, "--timeout", "5")
    assert refused.returncode == 1 and "no verified live session" in refused.stderr, refused.stderr
    ranks = {r["rank"]: r for r in job["ranks"]}
    assert sorted(ranks) == [0, 1]
    assert sorted(r["host"] for r in ranks.values()) == [hosts.addr["n0"], hosts.addr["n1"]]

    # ps on either node, with no flag, lists both ranks in one session: that node's own (merged with the
    # store's view of the other node); the laptop names the job by node 0's launcher's session id
    sid = {h: launcher_session(hosts, h) for h in ("n0", "n1")}
    assert sorted(n["session_id"] for n in job["nodes"]) == sorted(sid.values())
    assert job["session_id"] == next(n["session_id"] for n in job["nodes"] if n["node_rank"] == 0)
    for h in ("n0", "n1"):
        s = wait_view(hosts, h, 2)
        assert s["session_id"] == sid[h]
        assert {r["rank"]: r["host"] for r in s["ranks"]} == {n: r["host"] for n, r in ranks.items()}

    # generated VS Code configs follow the running job's placement, and a --hosts guess that
    # disagrees with it (here deliberately swapped) is named, never used
    swapped = f"{ranks[1]['host']},{ranks[0]['host']}"
    v = hosts.rtdebug(
        "lap",
        "vscode",
        "--script",
        str(SCRIPT),
        "--nproc-per-node",
        "1",
        "--nnodes",
        "2",
        "--hosts",
        swapped,
        "--store",
        store,
    )
    assert v.returncode == 0, v.stderr
    connects = [c["connect"] for c in json.loads(v.stdout)["configurations"][:2]]
    assert connects == [{"host": ranks[n]["host"], "port": ranks[n]["port"]} for n in (0, 1)]
    warning = f"rtdebug: warning: rank 0 of job {job['session_id']} runs on {ranks[0]['host']}, not on --hosts entry"
    assert warning in v.stderr

    # the endpoints admit the laptop only (--debug-allow): the other node gets no reply at all
    other = "n1" if ranks[0]["host"] == hosts.addr["n0"] else "n0"
    knock = hosts.run(other, PY, "-c", KNOCK, ranks[0]["host"], str(ranks[0]["port"]), timeout=60)
    assert knock.stdout.strip() in ("closed", "reset"), knock.stdout + knock.stderr

    # a flood of 2000 refused connects (another uid, on rank 0's own host; a loaded machine completes a
    # few hundred, not all) costs the job nothing: refusals never advance the store's liveness tick, so
    # no node looks lost and the job runs on (issue 19)
    flood = hosts.run(
        "n0" if ranks[0]["host"] == hosts.addr["n0"] else "n1",
        *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", FLOOD),
        ranks[0]["host"],
        str(ranks[0]["port"]),
        timeout=120,
    )
    assert flood.returncode == 0 and int(flood.stdout) > 250, flood.stdout + flood.stderr
    # the job's own clock moves on more than LOST_ROUNDS heartbeat rounds of every rank after the flood (a rank
    # the flood had stalled would then show lost)
    beyond = job_tick(hosts, store) + (c10d.LOST_ROUNDS + 1) * len(ranks)
    until(lambda: job_tick(hosts, store), 120, f"the job's tick at {beyond}", ok=lambda t: t >= beyond, every=1)
    after = ps_json(hosts, "lap", "--store", store)["sessions"][0]
    assert after["state"] == "running" and all(r["state"] in ("ready", "attached") for r in after["ranks"]), after

    # attach from the laptop through the view; each rank stops where dist.get_rank() is N and the
    # process's own socket address and NODE_ADDR are those of the namespace the view names
    for rank in (0, 1):  # by the id either node's launcher printed
        where, value = attach_and_stop(hosts, store, rank, "--session", sid["n1" if rank == 0 else "n0"])
        assert where["host"] == ranks[rank]["host"]
        assert value == f"{rank}|{where['host']}|{where['host']}", value

    # node 0's rank stays stopped at a breakpoint; node 1's launcher is SIGKILLed. torchrun alone
    # would leave node 0 waiting until its next collective; the view marks node 1's rank lost, and
    # node 0 ends itself: nothing left on either host.
    r0 = next(r for r in ranks.values() if r["host"] == hosts.addr["n0"])
    r1 = next(r for r in ranks.values() if r["host"] == hosts.addr["n1"])
    line = str(marker_line(SCRIPT, "multinode step"))
    holder = hosts.spawn("lap", PY, str(PROBE), r0["host"], str(r0["port"]), str(SCRIPT), line, "1", "hold")
    assert json.loads(holder.stdout.readline())["line"] == int(line)
    n1.kill()
    deadline = time.monotonic() + 90
    while True:
        view = ps_json(hosts, "lap", "--store", store)["sessions"][0]
        lost = next(r for r in view["ranks"] if r["rank"] == r1["rank"])
        if lost["state"] == "failed":
            break
        assert time.monotonic() < deadline, view
        time.sleep(1)
    assert lost["error"].startswith("lost: not heard from for ~") and hosts.addr["n1"] in lost["error"]
    left = wait_empty(hosts, ["n0", "n1"], timeout=150)
    assert not left, f"still running: {left}\nn0: {hosts.log('n0')}"
    assert n0.wait(timeout=30) != 0
    ended = "has not been heard from for ~30s; ending this node (the job cannot go on without it)"
    assert ended in hosts.log("n0", tail=1 << 30)
    gone = hosts.rtdebug("lap", "ps", "--store", store)
    assert gone.returncode == 1
    assert f"rtdebug: error: cannot reach the job store at {store}: the job has ended" in gone.stderr
    assert ps_json(hosts, "n0")["sessions"] == [] and ps_json(hosts, "n1")["sessions"] == []


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: SIGKILL of the node that hosts the store")
def test_full_kill_the_node_that_hosts_the_store(hosts, tmp_path):
    """torchrun's own failure detection ends node 1 (its agent loses the rendezvous store)."""
    n0, n1, store, _ = start_job(hosts, tmp_path, 1)
    n0.kill()
    left = wait_empty(hosts, ["n0", "n1"], timeout=120)
    assert not left, f"still running: {left}\nn1: {hosts.log('n1')}"
    assert n1.wait(timeout=30) != 0
    gone = hosts.rtdebug("lap", "ps", "--store", store)
    assert f"rtdebug: error: cannot reach the job store at {store}: the job has ended" in gone.stderr
    assert ps_json(hosts, "n1")["sessions"] == []


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: 2 nodes x 2 ranks, stopped from the laptop")
def test_full_two_by_two_stop_from_laptop(hosts, tmp_path):
    n0, n1, store, job = start_job(hosts, tmp_path, 2)
    by_host: dict[str, list[int]] = {}
    for r in job["ranks"]:
        by_host.setdefault(r["host"], []).append(r["rank"])
    assert sorted(by_host) == [hosts.addr["n0"], hosts.addr["n1"]]
    assert all(len(v) == 2 for v in by_host.values())
    for rank in range(4):
        where, value = attach_and_stop(hosts, store, rank)
        assert value == f"{rank}|{where['host']}|{where['host']}", value
    r = hosts.rtdebug("lap", "stop", "--store", store, "--session", job["session_id"], timeout=180)
    assert r.returncode == 0, r.stderr
    assert f"through the store at {store}" in r.stdout
    assert not wait_empty(hosts, ["n0", "n1"], timeout=120)
    assert n0.wait(timeout=30) is not None and n1.wait(timeout=30) is not None


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: the guide's Ray Train local-mode example on two hosts")
def test_full_guide_command_ray_local_mode(hosts, tmp_path):
    """RAY_TRAIN_V2_ENABLED=1 and a TorchTrainer in local mode: Ray's LocalTorchController builds the
    process group on two hosts while every rank also publishes itself into the rendezvous store."""
    ep = f"{hosts.addr['n0']}:{RDZV_PORT}"
    procs = {}
    for node in ("n0", "n1"):
        # enough epochs for the view to see both ranks ready before they finish
        args = ["torchrun", *node_args(hosts, node, [str(EXAMPLES / "ddp_fashion.py"), "--epochs", "6"])]
        procs[node] = hosts.start(node, args, RAY_TRAIN_V2_ENABLED="1")
    job = wait_view(hosts, "lap", 2, "--store", ep)
    assert sorted(r["host"] for r in job["ranks"]) == [hosts.addr["n0"], hosts.addr["n1"]]
    for node, p in procs.items():
        assert p.wait(timeout=400) == 0, hosts.log(node)
        assert "final metrics" in hosts.log(node)
    assert not wait_empty(hosts, ["n0", "n1"], timeout=60)


def test_ray_train_report_meets_every_rank_across_two_hosts(hosts, tmp_path):
    """Local mode with the cluster's semantics on two hosts: report() meets every rank through the job's c10d
    store, both hosts' files land in one checkpoint directory, and one process calls the callback."""
    storage = tmp_path / "results"
    job = [str(SCRIPTS / "raylocal_faults.py"), "ok", str(storage)]
    procs = {node: hosts.start(node, ["torchrun", *node_args(hosts, node, job)]) for node in ("n0", "n1")}
    for node, p in procs.items():
        assert p.wait(timeout=400) == 0, hosts.log(node)
    kept = sorted(d for d in (storage / "faults").iterdir() if d.is_dir())
    assert len(kept) == 2 and all(sorted(os.listdir(d)) == ["rank0.txt", "rank1.txt"] for d in kept)
    assert hosts.log("n0").count("callback after_report ranks=[0, 1]") == 3
    assert "callback after_report" not in hosts.log("n1")


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: static rendezvous on two hosts")
def test_full_static_rendezvous_view_through_the_agent_store(hosts, tmp_path):
    """Static rendezvous: the ranks publish into the agent store at --master-addr:--master-port."""
    stop = tmp_path / "stop"
    procs = {}
    for node in ("n0", "n1"):
        args = ["torchrun", *node_args(hosts, node, [str(SCRIPT), str(stop)], static=True)]
        procs[node] = hosts.start(node, args)
    job = wait_view(hosts, "lap", 2, "--store", f"{hosts.addr['n0']}:{RDZV_PORT}")
    placed = {r["rank"]: r["host"] for r in job["ranks"]}
    assert placed == {0: hosts.addr["n0"], 1: hosts.addr["n1"]}  # static: node rank N runs ranks N*nproc...
    assert {r["rank"]: r["host"] for r in wait_view(hosts, "n1", 2)["ranks"]} == placed
    stop.write_text("done")
    for node, p in procs.items():
        assert p.wait(timeout=120) == 0, hosts.log(node)
    assert not wait_empty(hosts, ["n0", "n1"], timeout=60)


HANG = EXAMPLES / "hang.py"
ARROW = "\u2190"


def stacks_json(hosts: Hosts, h: str, *args: str, env: tuple[str, ...] = ()) -> dict:
    r = hosts.run(h, "env", *env, PY, "-m", "rtdebug", "stacks", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def grouped(snap: dict) -> dict[tuple[int, ...], str]:
    """Ranks -> the user's frame of their group (the innermost frame may be torch's or rtdebug's wrapper)."""
    return {tuple(g["ranks"]): g["label"].split(f" {ARROW} ")[-1] for g in snap["groups"]}


def group_line(text: str, ranks: str, where: str) -> bool:
    return any(ln.startswith(f"{ranks}: ") and where in ln for ln in text.splitlines())


def test_hang_one_grouped_answer_for_every_rank_of_two_nodes(hosts, tmp_path):
    """2 nodes x 2 ranks, the hang example: rank 1 waits in barrier while 0, 2, 3 wait in all_reduce.
    The laptop, a process on node 1 with an empty registry and only --store, and plain ``stacks`` on
    node 1 all get one grouped answer covering the 4 ranks; node 0's launcher (it hosts the store)
    writes the automatic hang report for the whole job."""
    store = f"{hosts.addr['n0']}:{RDZV_PORT}"
    extra = ["--hang-report", "6", "--pg-timeout", "300"]
    for node in ("n0", "n1"):
        hosts.start(node, ["torchrun", *extra, *node_args(hosts, node, [str(HANG)], nproc=2)])
    wait_view(hosts, "lap", 4, "--store", store)
    reduce_at = f"train_step (hang.py:{marker_line(HANG, 'hang all_reduce')})"
    barrier_at = f"evaluate (hang.py:{marker_line(HANG, 'hang barrier')})"
    want = {(0, 2, 3): reduce_at, (1,): barrier_at}
    deadline = time.monotonic() + 120
    while True:  # the ranks reach the hang after their agreeing steps
        snap = stacks_json(hosts, "lap", "--store", store)
        if grouped(snap) == want or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert grouped(snap) == want, (snap, hosts.trouble())
    assert snap["source"] == f"store {store}" and snap["unverified"] == [] and snap["unresponsive"] == []
    # each rank's answer carries its collective position: the verdict names rank 1, elsewhere than ALLREDUCE #4
    assert snap["culprit"] == 1, snap["verdict"]
    assert snap["verdict"].startswith("rank 1 is in BARRIER #4 (hang.py:"), snap["verdict"]  # Flight Recorder's
    text = hosts.rtdebug("lap", "stacks", "--store", store)
    assert text.returncode == 0, text.stderr
    assert group_line(text.stdout, "ranks 0,2-3", reduce_at) and group_line(text.stdout, "rank 1", barrier_at)
    assert f"(every rank of the job, through the store {store})" in text.stdout
    assert text.stdout.startswith(snap["verdict"] + "\n")  # the verdict line first

    # on node 1: a process with an empty registry and only --store; and plain `stacks` (its session's store)
    empty = tmp_path / "empty-registry"
    alone = stacks_json(hosts, "n1", "--store", store, env=(f"RTDEBUG_REGISTRY_DIR={empty}",))
    assert grouped(alone) == want
    assert grouped(stacks_json(hosts, "n1")) == want
    # a laptop set up once with RTDEBUG_STORE (as `ps` reads it; the VS Code extension names no store)
    assert grouped(stacks_json(hosts, "lap", env=(f"RTDEBUG_STORE={store}",))) == want
    # without the job's secret: the job is unverified (named explicitly) and its ranks do not answer a
    # request not signed with their secret
    nosecret = ("-u", "RTDEBUG_JOB_SECRET")
    refused = hosts.run("lap", "env", *nosecret, PY, "-m", "rtdebug", "stacks", "--store", store)
    assert refused.returncode == 1 and "no verified live session" in refused.stderr, refused.stderr
    bare = stacks_json(hosts, "lap", "--store", store, "--timeout", "1", "--session", snap["session_id"], env=nosecret)
    assert bare["groups"] == [] and bare["unresponsive"] == [0, 1, 2, 3]
    assert "it answers only requests signed with its job's secret" in bare["unresponsive_detail"][0]["reason"]

    # the automatic report, on the node that hosts the store, covers both nodes' ranks
    report = hang_report(  # the report's summary lines
        hosts, "n0", lambda r: group_line(r, "ranks 0,2-3", reduce_at) and group_line(r, "rank 1", barrier_at), 60
    )
    assert group_line(report, "ranks 0,2-3", reduce_at) and group_line(report, "rank 1", barrier_at), report
    assert "where every rank is:\nrank 1 is in BARRIER #4 (hang.py:" in report, report  # the culprit


# -- the default secret: no RTDEBUG_JOB_SECRET anywhere ------------------------------------------------------
@pytest.fixture
def bare_hosts(tmp_path, monkeypatch):
    """Hosts with no job secret set anywhere: each node signs with its user's default secret file."""
    for var in ("RTDEBUG_JOB_SECRET", "RTDEBUG_JOB_SECRET_FILE"):
        monkeypatch.delenv(var, raising=False)
    yield from hosts_up(tmp_path)


def home_env(home: Path) -> dict[str, str]:
    """A node whose user's home is ``home`` (its default secret: ``home``/.config/rtdebug/job.secret)."""
    return {"HOME": str(home), "XDG_CONFIG_HOME": ""}


def start_hang(hosts: Hosts, homes: dict[str, Path]) -> tuple[str, str]:
    """examples/hang.py on 2 nodes x 1 rank (rank 1 waits in barrier, rank 0 in all_reduce), each node with
    its own home; (where rank 0 waits, where rank 1 waits) as ``grouped`` names them."""
    for node in ("n0", "n1"):
        args = ["torchrun", "--hang-report", "6", "--pg-timeout", "300", *node_args(hosts, node, [str(HANG)])]
        hosts.start(node, args, **home_env(homes[node]))
    wait_view(hosts, "n0", 2)
    return (
        f"train_step (hang.py:{marker_line(HANG, 'hang all_reduce')})",
        f"evaluate (hang.py:{marker_line(HANG, 'hang barrier')})",
    )


REPORT = "rtdebug: no rank's stack has changed for "


def hang_report(hosts: Hosts, node: str, complete: Callable[[str], object], timeout: float = 90) -> str:
    """The node's first automatic no-progress report, unindented, up to its first blank line, once it holds
    what ``complete`` looks for (written in one piece, it may still be read cut short)."""

    def report() -> str:
        log = hosts.log(node, tail=1 << 30)
        if REPORT not in log:
            return ""
        return log.split(REPORT, 1)[1].split("\n\n", 1)[0].replace("\n  ", "\n")

    return until(
        report, timeout, f"{node}'s hang report", ok=lambda r: bool(r) and complete(r), every=1, context=hosts.trouble
    )


def test_no_secret_set_anywhere_a_shared_home_answers_for_every_rank(bare_hosts, tmp_path):
    """Both nodes share one home and nobody set a secret: the first launcher makes the default secret file
    there, both sign with it, so `stacks` on either node gets every rank's answer, verified, and node 0's
    automatic hang report covers both nodes."""
    hosts = bare_hosts
    home = tmp_path / "home"
    reduce_at, barrier_at = start_hang(hosts, {"n0": home, "n1": home})
    want = {(0,): reduce_at, (1,): barrier_at}
    env = tuple(f"{k}={v}" for k, v in home_env(home).items())
    # a verdict made of both ranks' signed answers (only those count)
    lines = (marker_line(HANG, "hang all_reduce"), marker_line(HANG, "hang barrier"))
    verdict = (
        f"ranks are blocked in different collectives: rank 0 in ALLREDUCE #4 (hang.py:{lines[0]}); "
        f"rank 1 in BARRIER #4 (hang.py:{lines[1]})"
    )
    for node in ("n0", "n1"):
        deadline = time.monotonic() + 120
        while grouped(snap := stacks_json(hosts, node, env=env)) != want:
            assert time.monotonic() < deadline, (snap, hosts.trouble())
            time.sleep(1)
        assert snap["unverified"] == [] and snap["unresponsive"] == [], snap
        assert (snap["verdict"] or "").startswith(verdict), snap["verdict"]
    secret = home / ".config" / "rtdebug" / "job.secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.parent.stat().st_mode & 0o777 == 0o700
    report = hang_report(
        hosts, "n0", lambda r: group_line(r, "rank 0", reduce_at) and group_line(r, "rank 1", barrier_at)
    )
    assert group_line(report, "rank 0", reduce_at) and group_line(report, "rank 1", barrier_at), report
    assert "another job secret" not in report


def test_nodes_with_different_default_secrets_are_said_in_one_line(bare_hosts, tmp_path):
    """Each node has a home of its own, so a default secret of its own: `stacks` on node 0 shows its rank,
    and says in one line, before the verdict, that rank 1 uses another secret and how to fix it; so does
    node 0's hang report."""
    hosts = bare_hosts
    homes = {"n0": tmp_path / "home0", "n1": tmp_path / "home1"}
    reduce_at, _ = start_hang(hosts, homes)
    line = (
        "warning: rank 1 uses another job secret than this machine (so it ignores its request): set "
        "RTDEBUG_JOB_SECRET to the same value on every node, or share ~/.config/rtdebug (the default secret) "
        "between them"
    )
    env = tuple(f"{k}={v}" for k, v in home_env(homes["n0"]).items())
    deadline = time.monotonic() + 120
    while True:
        r = hosts.run("n0", "env", *env, PY, "-m", "rtdebug", "stacks")
        assert r.returncode == 0, r.stderr
        if group_line(r.stdout, "rank 0", reduce_at) or time.monotonic() > deadline:
            break
        time.sleep(1)
    lines = r.stdout.splitlines()
    assert group_line(r.stdout, "rank 0", reduce_at) and lines[0] == line, r.stdout
    assert [ln for ln in lines if "another job secret" in ln] == [line]
    assert (tmp_path / "home0" / ".config" / "rtdebug" / "job.secret").read_text() != (
        tmp_path / "home1" / ".config" / "rtdebug" / "job.secret"
    ).read_text()
    report = hang_report(hosts, "n0", lambda r: group_line(r, "rank 0", reduce_at))  # the groups follow the line
    assert report.split("\n", 1)[1].startswith(line + "\n"), report  # after "... where every rank is:"
    assert [ln for ln in report.splitlines() if "another job secret" in ln] == [line]
