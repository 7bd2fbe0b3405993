"""The store view against a real c10d TCPStore: what ranks publish, what any machine reads back.

Also the launcher-side helpers (``rtdebug.launcher.multinode``) and how the views merge one
job seen by this node's files and by its store. The separate-hosts e2e test is
``test_multinode.py``.
"""

from __future__ import annotations

import json
import subprocess
import time
from argparse import Namespace

import jsonschema
import pytest

from rtdebug.commands import vsconfigs as vscode
from rtdebug.common.errors import HarnessError
from rtdebug.launcher import multinode
from rtdebug.rank import publish
from rtdebug.registry import c10d
from rtdebug.registry.entry import SCHEMA_PATH
from rtdebug.views.api import _merge
from rtdebug.views.store import StoreView, connect_host

from support.entries import node_entry, rank_entry
from support.wait import until

SCHEMA = json.loads(SCHEMA_PATH.read_text())


@pytest.fixture
def store():
    """A real TCPStore server, as torchrun's agent hosts one at the rendezvous endpoint."""
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True)
    yield server
    del server


def test_published_ranks_read_back_as_one_schema_valid_session(store):
    pubs = []
    for rank in (0, 1):
        p = publish.Publisher("127.0.0.1", store.port, "job", rank, group_rank=rank)
        p.node = node_entry(rank)
        p.update(rank_entry(rank))
        pubs.append(p)
    assert all(p.flush(20) for p in pubs)
    [s] = StoreView("127.0.0.1", store.port).sessions()
    assert s["session_id"] == "node0-session" and s["rdzv_id"] == "job" and s["state"] == "running"
    assert [n["session_id"] for n in s["nodes"]] == ["node0-session", "node1-session"]
    # on a node, the job is named by that node's own launcher's session (merges with its files)
    mine = StoreView("127.0.0.1", store.port, local_ids=frozenset({"node1-session"})).sessions()[0]
    assert mine["session_id"] == "node1-session" and {r["session_id"] for r in mine["ranks"]} == {"node1-session"}
    assert s["source"] == f"store 127.0.0.1:{store.port}" and s["store"] == f"127.0.0.1:{store.port}"
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    assert {r["node_ip"] for r in s["ranks"]} == {"127.0.0.1"}
    assert [n["node_rank"] for n in s["nodes"]] == [0, 1]
    jsonschema.validate({k: v for k, v in s.items() if k not in ("ranks", "source")}, SCHEMA)
    for r in s["ranks"]:
        jsonschema.validate(r, SCHEMA)
    # a state change reaches the store; the final one is flushed before update() returns
    pubs[1].update(dict(rank_entry(1), state="exited", exit_code=0), final=True)
    # any node's session id finds the job, under that id
    found = StoreView("127.0.0.1", store.port).session("node1-session")
    assert found["session_id"] == "node1-session" and found["ranks"][1]["state"] == "exited"
    assert StoreView("127.0.0.1", store.port).session("no-such-session") is None
    for p in pubs:
        p.close()
    assert not any(p._thread.is_alive() for p in pubs)


def test_a_rank_whose_heartbeat_stopped_is_shown_lost(store):
    """Judged by the job's logical clock (a counter every heartbeat advances), never by comparing
    clocks: rank 1's node clock is an hour ahead, yet it is the one that stopped."""
    now = time.time()
    store.set(publish.node_key("job", 0), json.dumps(dict(node_entry(0), heartbeat=now, tick=40)))
    store.set(publish.rank_key("job", 0), json.dumps(dict(rank_entry(0), heartbeat=now, tick=40)))
    late = dict(rank_entry(1), node_ip="10.9.9.2", heartbeat=now + 3600, tick=10)
    store.set(publish.rank_key("job", 1), json.dumps(late))
    [s] = StoreView("127.0.0.1", store.port).sessions()
    assert s["ranks"][0]["state"] == "ready"
    assert s["ranks"][1]["state"] == "failed"
    assert s["ranks"][1]["error"] == "lost: not heard from for ~30s (its node 10.9.9.2 is gone?)"
    store.set(publish.rank_key("job", 1), json.dumps(dict(late, tick=38)))  # one round behind: fine
    assert [r["state"] for r in StoreView("127.0.0.1", store.port).sessions()[0]["ranks"]] == ["ready", "ready"]


@pytest.mark.parametrize("peer_state, ends", [("ready", True), ("exited", False)])
def test_a_node_ends_itself_when_a_peer_is_lost(store, capfd, peer_state, ends):
    """A watching node whose peer stopped ticking stops its own launcher; a peer that ended cleanly
    (or a job that may continue, watch_peers=False) does not count."""
    store.set(publish.rank_key("job", 1), json.dumps(dict(rank_entry(1, state=peer_state), node_ip="10.9.9.2")))
    launcher = subprocess.Popen(["sleep", "60"])
    p = publish.Publisher(
        "127.0.0.1", store.port, "job", 0, heartbeat_s=0.05, launcher_pid=launcher.pid, watch_peers=True
    )
    try:
        p.update(rank_entry(0))
        if ends:
            assert launcher.wait(timeout=30) == -15
            assert (
                "rtdebug: rank 0: rank 1 (node 10.9.9.2) has not been heard from for ~30s; ending this node"
                in capfd.readouterr().err
            )
        else:
            until(
                lambda: int(store.add(publish.tick_key("job"), 0)) > 100, 20, "the job's tick well past the threshold"
            )
            assert launcher.poll() is None
    finally:
        p.close()
        launcher.kill()


def test_unreachable_store(store):
    from rtdebug.common.ports import is_port_free

    port = store.port + 1 if is_port_free(store.port + 1) else store.port + 2
    with pytest.raises(HarnessError) as exc:
        StoreView("127.0.0.1", port).sessions()
    assert exc.value.message.startswith(f"cannot reach the job store at 127.0.0.1:{port}: the job has ended")
    assert StoreView("127.0.0.1", port, explicit=False).sessions() == []


def test_stop_through_the_store_signals_each_nodes_launcher(store):
    launcher = subprocess.Popen(["sleep", "60"])  # stands in for a node's launcher: it gets SIGTERM
    try:
        p = publish.Publisher(
            "127.0.0.1", store.port, "job", 0, group_rank=0, heartbeat_s=0.2, launcher_pid=launcher.pid
        )
        p.node = node_entry(0)
        p.update(rank_entry(0))
        assert p.flush(20)
        store.set(publish.stop_key("job"), b"1")
        assert launcher.wait(timeout=20) == -15
        p.close()
    finally:
        launcher.kill()


def test_job_store():
    c10d = Namespace(rdzv_backend="c10d", rdzv_endpoint="10.1.2.3", rdzv_id="my job", standalone=False)
    assert multinode.job_store(c10d, 2) == "10.1.2.3:29400"
    assert multinode.job_store(Namespace(**{**vars(c10d), "rdzv_endpoint": "[fe80::1]:29500"}), 2) == "[fe80::1]:29500"
    assert multinode.job_store(c10d, 1) is None  # one node: the local registry sees every rank
    static = Namespace(rdzv_backend="static", rdzv_endpoint="", master_addr="10.1.2.3", master_port=29501)
    assert multinode.job_store(static, 2) == "10.1.2.3:29501"  # the agent store the ranks' process group uses
    assert multinode.job_store(Namespace(**{**vars(c10d), "rdzv_backend": "etcd"}), 2) is None
    assert multinode.job_store(Namespace(**{**vars(c10d), "standalone": True}), 2) is None
    # a node ends itself over a lost peer only when the job cannot go on without it
    assert multinode.fixed_job(Namespace(nnodes="2", max_restarts=0))
    assert not multinode.fixed_job(Namespace(nnodes="1:2", max_restarts=0))
    assert not multinode.fixed_job(Namespace(nnodes="2", max_restarts=3))


def test_debug_host_auto():
    c10d = Namespace(rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29500", master_addr="127.0.0.1")
    assert multinode.resolve_debug_host("auto", c10d) == "127.0.0.1"  # a loopback job stays private
    assert multinode.resolve_debug_host("10.0.0.5", c10d) == "10.0.0.5"
    static = Namespace(rdzv_backend="static", rdzv_endpoint="", master_addr="localhost")
    assert multinode.resolve_debug_host("auto", static) == "127.0.0.1"
    bad = Namespace(rdzv_backend="c10d", rdzv_endpoint="no-such-host.invalid:29500")
    with pytest.raises(HarnessError) as exc:
        multinode.resolve_debug_host("auto", bad)
    assert exc.value.exit_code == 2
    assert exc.value.message.startswith("--debug-host auto: no route to the rendezvous host no-such-host.invalid")


def test_connect_host_for_a_remote_rank():
    wildcard = dict(rank_entry(1, host="0.0.0.0"), node_ip="10.9.9.2")
    assert connect_host(wildcard) == ("10.9.9.2", None)
    remote_loop = dict(rank_entry(1), node_ip="10.9.9.2", hostname="node1")
    host, note = connect_host(remote_loop, is_local=lambda a: a == "127.0.0.1")
    assert host == "127.0.0.1"
    assert "listens on 127.0.0.1 of node 10.9.9.2 (node1)" in note
    assert "ssh -N -L 5679:127.0.0.1:5679 10.9.9.2" in note
    assert connect_host(dict(rank_entry(0), node_ip="127.0.0.1")) == ("127.0.0.1", None)


def test_views_merge_this_nodes_ranks_with_the_stores():
    local = dict(node_entry(0), ranks=[rank_entry(0)], source="local")
    remote = dict(
        node_entry(0),
        ranks=[dict(rank_entry(0), state="attached"), rank_entry(1)],
        nodes=[{"node_rank": 0}],
        source="store x:1",
    )
    merged = _merge(local, remote)
    assert [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert merged["ranks"][0]["state"] == "ready"  # this node's own file wins for its rank
    assert merged["source"] == "local" and merged["nodes"] == [{"node_rank": 0}]


def test_vscode_multinode_configs_are_resolved_never_guessed():
    out = vscode.generate("t.py", nproc=1, nnodes=2)
    ranks = [c for c in out["configurations"] if c.get("rank") in (0, 1)]
    assert [(c["type"], c["request"], c["rank"]) for c in ranks] == [("rtdebug", "attach", 0), ("rtdebug", "attach", 1)]
    assert out["compounds"][0]["configurations"] == [c["name"] for c in ranks]
    placed = vscode.generate("t.py", nproc=1, nnodes=2, hosts=["a", "b"], endpoints={0: ("b", 5678), 1: ("a", 5679)})
    assert [c["connect"] for c in placed["configurations"][:2]] == [
        {"host": "b", "port": 5678},
        {"host": "a", "port": 5679},
    ]


def test_debug_host_auto_is_for_torchrun_only(capsys):
    from rtdebug import cli

    from support.paths import EXAMPLES

    assert cli.main(["run", "--host", "auto", str(EXAMPLES / "local_linear.py")]) == 2
    assert capsys.readouterr().err == (
        "rtdebug: error: --host auto picks the address toward a multi-node job's rendezvous host: "
        "it is for `rtdebug torchrun --debug-host auto`\n"
    )


def test_run_ids_with_slashes_and_the_jobs_own_keys(store):
    store.set(publish.node_key("team/job", 0), json.dumps(dict(node_entry(0), tick=3)))
    for rank in (0, 1):
        store.set(publish.rank_key("team/job", rank), json.dumps(dict(rank_entry(rank), tick=3)))
    store.add(publish.tick_key("team/job"), 3)
    store.set(publish.stop_key("other"), b"1")
    [s] = StoreView("127.0.0.1", store.port).sessions()
    assert s["rdzv_id"] == "team/job" and [r["rank"] for r in s["ranks"]] == [0, 1]


def test_junk_entries_in_the_store_are_skipped_never_a_crash(store, registry_dir, capsys):
    """Anyone who reaches the store can write it: a garbage node entry, a rank entry without its fields and
    a value that is not JSON are skipped; the real job is still listed, and `ps --store` exits 0."""
    store.set(c10d.node_key("job", 0), json.dumps(dict(node_entry(0), tick=3)))
    store.set(c10d.rank_key("job", 0), json.dumps(dict(rank_entry(0), tick=3)))
    store.set(c10d.node_key("job", 1), json.dumps({"schema_version": 1, "kind": "session", "oops": True}))
    store.set(c10d.rank_key("job", 1), json.dumps({"schema_version": 1, "kind": "rank", "rank": 1}))
    store.set(c10d.node_key("junk", 0), b"\x00not json")
    store.set(c10d.rank_key("forged", 0), json.dumps(dict(rank_entry(0), port="4444")))
    view = StoreView("127.0.0.1", store.port)
    [s] = view.sessions()
    assert s["rdzv_id"] == "job" and [r["rank"] for r in s["ranks"]] == [0] and len(s["nodes"]) == 1
    junk = [c10d.node_key("job", 1), c10d.rank_key("job", 1), c10d.rank_key("forged", 0), c10d.node_key("junk", 0)]
    assert sorted(view.skipped) == sorted(junk)
    from rtdebug import cli

    assert cli.main(["ps", "--store", f"127.0.0.1:{store.port}"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for key in junk:  # each named in one warning line
        assert len([line for line in err.splitlines() if f"entry {key!r}:" in line]) == 1, err
