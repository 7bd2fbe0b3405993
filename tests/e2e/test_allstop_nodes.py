"""All-stop across nodes: a real 2-node torchrun job (c10d rendezvous, gloo) in network namespaces, each node
launched by ``rtdebug torchrun`` with a registry of its own (no shared files), so a stop on node B reaches node
A only through the job's store (``rtdebug.rank.allstop_nodes``). Plain DAP clients in the "laptop" namespace
(``tests/scripts/allstop_nodes_probe.py``); entries read with ``rtdebug ps --json --store``. CI runs 2 nodes x
1 rank with a client on each; ``RTDEBUG_FULL=1`` adds 2 nodes x 2 ranks with no client on node A, and node A
letting go when the stopped rank on node B is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from support.netns import Hosts, hosts_up
from support.paths import PY, SCRIPTS, marker_line
from support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

SCRIPT = SCRIPTS / "allstop_nodes_job.py"
PROBE = SCRIPTS / "allstop_nodes_probe.py"
LINE = marker_line(SCRIPT, "the last rank only")
RDZV_PORT = 29500
JOB_SECRET = "allstop-nodes-test-job-secret-0123456789"
FULL = os.environ.get("RTDEBUG_FULL") == "1"


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", JOB_SECRET)  # every node and the laptop (Hosts.env copies it)
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)  # all-stop as a user gets it (tests/conftest.py)
    yield from hosts_up(tmp_path)


def _start(hosts: Hosts, tmp_path: Path, nproc: int) -> tuple[list[subprocess.Popen], str, Path]:
    stop = tmp_path / "stop"
    n0 = hosts.addr["n0"]
    procs = []
    for i, node in enumerate(("n0", "n1")):
        args = ["torchrun", "--debug-host", "auto", "--debug-allow", hosts.addr["lap"], "--nnodes=2",
                f"--nproc-per-node={nproc}", f"--node_rank={i}", "--rdzv_backend=c10d",
                f"--rdzv_endpoint={n0}:{RDZV_PORT}", "--rdzv_id=job", "--rdzv-conf", f"is_host={1 - i}",
                "--local-addr", hosts.addr[node], str(SCRIPT), str(stop)]  # fmt: skip
        procs.append(hosts.start(node, args))
    return procs, f"{n0}:{RDZV_PORT}", stop


def _ranks(hosts: Hosts, store: str) -> dict[int, dict]:
    r = hosts.rtdebug("lap", "ps", "--json", "--store", store)
    if r.returncode != 0:  # the store is not up before the rendezvous host's agent starts
        assert "cannot reach the job store" in r.stderr, r.stderr
        return {}
    sessions = json.loads(r.stdout)["sessions"]
    return {x["rank"]: x for s in sessions for x in s["ranks"]}


def _wait_ranks(hosts: Hosts, store: str, ok, what: str, timeout: float = 240) -> dict[int, dict]:
    return until(lambda: _ranks(hosts, store), timeout, what, ok=ok, every=0.5, context=hosts.trouble)


def _state(rank: dict) -> str:
    return str((rank.get("debug") or {}).get("state") or "")


def _ready(n: int):
    return lambda ranks: len([r for r in ranks.values() if r["state"] in ("ready", "attached")]) == n


def _run(hosts: Hosts, tmp_path: Path, nproc: int, with_clients_on_a: bool) -> None:
    procs, store, stop = _start(hosts, tmp_path, nproc)
    world = 2 * nproc
    ranks = _wait_ranks(hosts, store, _ready(world), f"{world} ready ranks seen from the laptop")
    node = {r: x["host"] for r, x in ranks.items()}
    on_a = [r for r in ranks if node[r] == hosts.addr["n0"]]
    stopper = world - 1
    assert sorted(on_a) == list(range(nproc)) and node[stopper] == hosts.addr["n1"]
    at = {r: f"{x['host']}:{x['port']}" for r, x in ranks.items()}
    go = tmp_path / "go"
    probe = hosts.spawn(
        "lap", PY, str(PROBE), str(go), str(SCRIPT), str(LINE), at[stopper],
        *([at[r] for r in on_a] if with_clients_on_a else []),
    )  # fmt: skip
    try:
        first = probe.stdout.readline() if probe.stdout else ""
        assert first, f"the probe ended: rc {probe.wait(30)}\n{hosts.trouble()}"
        seen = json.loads(first)
        assert seen["stopper"] == {"reason": "breakpoint", "line": LINE}
        if with_clients_on_a:  # node A's clients were told by their own ranks: a pause, no client asked
            assert [p["reason"] for p in seen["paused"]] == ["pause"] * len(on_a), seen

        def held(rs: dict[int, dict]) -> bool:
            a = [rs.get(r, {}) for r in on_a]
            return _state(rs.get(stopper, {})) == "stopped" and all(
                _state(x) in ("paused", "pausing") and (x.get("debug") or {}).get("by") == stopper for x in a
            )

        rs = _wait_ranks(hosts, store, held, f"node A's ranks {on_a} paused by rank {stopper} (node B)", 60)
        since = {r: float(rs[r]["debug"]["since"]) for r in [*on_a, stopper]}
        latency = max(since[r] for r in on_a) - since[stopper]  # one clock: the namespaces share the machine's
        print(f"all-stop across nodes: rank {stopper} stopped -> ranks {on_a} on the other node held in "
              f"{latency * 1000:.0f} ms (entries); clients: {seen['paused']}")  # fmt: skip
        assert rs[stopper]["debug"]["line"] == LINE and rs[stopper]["debug"]["reason"] == "breakpoint"

        go.write_text("")  # continue the stopper (node B): every rank of node A goes on too
        second = probe.stdout.readline() if probe.stdout else ""
        assert json.loads(second) == {"continued": len(on_a) if with_clients_on_a else 0}, second
        assert probe.wait(60) == 0
        _wait_ranks(hosts, store, lambda rs: all(_state(x) == "running" for x in rs.values()), "every rank running")
    finally:
        stop.write_text("")
    for p in procs:
        assert p.wait(120) == 0, hosts.trouble()
    for h in ("n0", "n1"):
        until(lambda h=h: not hosts.pids(h), 60, f"nothing left running on {h}")


def test_a_breakpoint_on_node_b_pauses_node_a_and_its_continue_continues_both(hosts, tmp_path):
    _run(hosts, tmp_path, 1, with_clients_on_a=True)


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: 2 nodes x 2 ranks, no client on node A")
def test_full_two_by_two_node_a_held_with_no_client(hosts, tmp_path):
    _run(hosts, tmp_path, 2, with_clients_on_a=False)


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: the stopped rank on node B SIGKILLed while node A is held")
def test_full_node_a_lets_go_when_the_stopped_rank_on_node_b_is_killed(hosts, tmp_path):
    _procs, store, _stop = _start(hosts, tmp_path, 1)  # the job fails (a rank killed): hosts.down ends it all
    ranks = _wait_ranks(hosts, store, _ready(2), "2 ready ranks seen from the laptop")
    probe = hosts.spawn(
        "lap", PY, str(PROBE), str(tmp_path / "go"), str(SCRIPT), str(LINE), f"{ranks[1]['host']}:{ranks[1]['port']}"
    )
    assert json.loads(probe.stdout.readline() if probe.stdout else "")["stopper"]["reason"] == "breakpoint"
    held = _wait_ranks(
        hosts, store, lambda rs: (rs.get(0, {}).get("debug") or {}).get("by") == 1 and _state(rs[0]) == "paused",
        "rank 0 (node A) paused by rank 1 (node B)", 60,
    )  # fmt: skip
    os.kill(int(held[1]["pid"]), signal.SIGKILL)  # nobody can continue it now
    until(lambda: "rank 1 (another node), whose stop holds this node, has ended" in hosts.log("n0", 1 << 20), 60,
          "node A let go of the dead rank's stop", context=hosts.trouble)  # fmt: skip
