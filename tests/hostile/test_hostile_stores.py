"""Hostile input through the cluster stores: whoever can write a job's c10d store or a Ray cluster's GCS KV.

Stores are hints, never authority: no pid read from them is signalled, an unverified entry (no MAC under a
job secret this reader knows) is listed and marked but never the default choice, and junk is named in one
line. Also a local rank entry whose pid is an unrelated process of the user's: ``stop`` spares it, since it
does not carry the session's id. One trial each, real stores: a TCPStore here, a Ray cluster of our own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from rtdebug import cli
from rtdebug.rank import publish
from rtdebug.registry import c10d, signing
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import reserve_session
from rtdebug.views.store import StoreView

from support.entries import node_entry, rank, rank_entry, session
from support.ports import port_free
from support.raycluster import AUTH_MODE, RayCluster

SECRET = "s3cret-for-this-job-only-0123456789"
FORGED_HOST = "203.0.113.66"


@pytest.fixture
def store():
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True)
    yield server
    del server


def tree(*cmd: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, psutil.Process]:
    """An unrelated process tree of this user's: ``bash`` with a ``sleep`` child."""
    p = subprocess.Popen(["bash", "-c", " ".join(cmd) or "sleep 300 & wait"], env=env)
    deadline = time.monotonic() + 10
    while not psutil.Process(p.pid).children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return p, psutil.Process(p.pid).children()[0]


def end(*procs) -> None:
    for p in procs:
        try:
            (p if isinstance(p, psutil.Process) else psutil.Process(p.pid)).kill()
        except psutil.Error:
            pass
        if isinstance(p, subprocess.Popen):
            p.wait()


def put(store, key: str, entry: dict, secret: str | None = None) -> None:
    store.set(key, json.dumps(signing.sign(key, entry, secret)))


def job(store, run_id: str, started_at: float, host: str, secret: str | None, port0: int = 5678) -> None:
    """A two-node, two-rank job in the store as its ranks publish it (signed with ``secret`` if given)."""
    for n in (0, 1):
        node = dict(node_entry(n), session_id=f"{run_id}-node{n}", started_at=started_at, rdzv_id=run_id, tick=5)
        put(store, c10d.node_key(run_id, n), dict(node, node_ip=host), secret)
        r = dict(rank_entry(n, host=host), session_id=f"{run_id}-node{n}", port=port0 + n, tick=5, node_ip=host)
        put(store, c10d.rank_key(run_id, n), r, secret)


# -- the c10d store ----------------------------------------------------------------------------------------
def test_a_forged_store_job_is_never_the_default(store, registry_dir, monkeypatch, capsys):
    """A forged job with a later started_at and a remote host: attach without --session and vscode pick the
    verified job; with no secret at all they pick nothing. Named with --session, its host is shown first."""
    endpoint = f"127.0.0.1:{store.port}"
    job(store, "real", time.time() - 100, "127.0.0.1", SECRET)
    job(store, "evil", time.time() + 3600, FORGED_HOST, None, port0=4444)
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", SECRET)
    assert cli.main(["attach", "--rank", "0", "--store", endpoint, "--json"]) == 0
    out = capsys.readouterr()
    assert FORGED_HOST not in out.out + out.err
    assert json.loads(out.out)["host"] == "127.0.0.1" and json.loads(out.out)["verified"] is True
    vs = ["vscode", "--script", "t.py", "--nproc-per-node", "1", "--nnodes", "2", "--store", endpoint]
    assert cli.main(vs) == 0
    configs = capsys.readouterr().out
    assert FORGED_HOST not in configs and '"port": 5679' in configs  # the verified job's placement
    assert cli.main(["ps", "--store", endpoint]) == 0
    listed = capsys.readouterr().out
    assert "session evil-node0" in listed and "[unverified]" in listed.split("session evil-node0")[1].splitlines()[0]

    monkeypatch.delenv("RTDEBUG_JOB_SECRET")  # nothing verifies: nothing is chosen
    assert cli.main(["attach", "--rank", "0", "--store", endpoint, "--timeout", "2"]) == 1
    out = capsys.readouterr()
    assert FORGED_HOST not in out.out + out.err and out.err.startswith("rtdebug: error: no verified live session")
    assert cli.main([*vs, "--hosts", "10.0.0.1,10.0.0.2"]) == 0
    out = capsys.readouterr()
    assert FORGED_HOST not in out.out and "10.0.0.1" in out.out  # the user's own --hosts, never the store's
    assert cli.main(["ps", "--json", "--store", endpoint]) == 0
    listed = json.loads(capsys.readouterr().out)["sessions"]
    assert {s["session_id"]: s["verified"] for s in listed} == {"real-node0": False, "evil-node0": False}
    # named explicitly, the forged job is the user's call, and its host is said first
    assert cli.main(["attach", "--rank", "0", "--store", endpoint, "--session", "evil-node0", "--json"]) == 0
    out = capsys.readouterr()
    assert f"it points at {FORGED_HOST}:4444" in out.err and json.loads(out.out)["verified"] is False


def test_an_entry_moved_to_another_key_or_edited_is_unverified(store, registry_dir, monkeypatch):
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", SECRET)
    job(store, "real", time.time(), "127.0.0.1", SECRET)
    good = json.loads(store.get(c10d.rank_key("real", 0)))
    store.set(c10d.rank_key("real", 1), json.dumps(dict(good, rank=1)))  # replayed as rank 1, edited
    [s] = StoreView("127.0.0.1", store.port).sessions()
    assert [r["verified"] for r in s["ranks"]] == [True, False] and s["verified"] is False


def test_junk_in_the_store_is_one_line_each(store, registry_dir, capsys):
    job(store, "real", time.time(), "127.0.0.1", None)
    junk = {
        c10d.node_key("real", 7): b"\x00garbage",
        c10d.rank_key("real", 9): json.dumps({"schema_version": 1, "kind": "rank"}),
        c10d.rank_key("other", 0): json.dumps(dict(rank_entry(0), node_ip=["not", "a", "str"])),
        c10d.rank_key("other", 1): json.dumps(dict(rank_entry(0), tick="x")),
    }
    for key, value in junk.items():
        store.set(key, value)
    assert cli.main(["ps", "--store", f"127.0.0.1:{store.port}"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for key in junk:
        assert (
            len([line for line in err.splitlines() if f"skipped store 127.0.0.1:{store.port} entry {key!r}" in line])
            == 1
        )


def test_updates_never_move_the_shared_tick_and_no_command_line_is_published(store):
    """32 entry updates (refusals counted, clients coming and going), each written on its own, between two
    heartbeats advance the job's clock not at all (only the heartbeat does), so no peer looks lost; the node
    entry carries the script, never its arguments."""
    # no heartbeat is due during the test (the first goes with the first write): the tick must not move at all
    p = publish.Publisher("127.0.0.1", store.port, "job", 0, group_rank=0, heartbeat_s=3600.0, secret=SECRET)
    p.node = dict(node_entry(0), command=["rtdebug", "torchrun", "t.py", "--token", "hunter2"])
    try:
        p.update(rank_entry(0))
        assert p.flush(20)
        start = int(store.add(c10d.tick_key("job"), 0))
        for i in range(32):
            p.update(dict(rank_entry(0), refused_count=i + 1))
            assert p.flush(20)  # the store has this update: each one is a write of its own
        assert int(store.add(c10d.tick_key("job"), 0)) == start
        assert json.loads(store.get(c10d.rank_key("job", 0)))["refused_count"] == 32
        node = store.get(c10d.node_key("job", 0))
        assert b"hunter2" not in node and json.loads(node)["command"] == [] and json.loads(node)["script"] == "t.py"
        assert signing.verify(c10d.node_key("job", 0), json.loads(node), [SECRET])
    finally:
        p.close()


# -- this machine's registry: a rank entry naming someone else's process -----------------------------------
def test_stop_signals_only_processes_that_carry_the_session_id(registry_dir, port_base, capsys):
    """The launcher is vouched for by the registry (pid + create time); a rank or a descendant must also
    carry RTDEBUG_SESSION=<id>. A rank entry with an unrelated process's pid and create time is spared."""
    env = dict(os.environ, RTDEBUG_SESSION="s1")
    launcher, untagged_child = tree("env -u RTDEBUG_SESSION sleep 300 & sleep 300 & wait", env=env)
    tagged = subprocess.Popen(["sleep", "300"], env=env)
    stranger = subprocess.Popen(["sleep", "300"])  # right create time in the entry, no session id
    try:
        reg = Registry()
        reg.ensure()
        reserve_session(reg, session("s1", pid=launcher.pid, ports=(port_base, port_base + 1)))
        reg.write_rank(rank("s1", 0, pid=tagged.pid))
        reg.write_rank(rank("s1", 1, pid=stranger.pid))
        assert cli.main(["stop", "--session", "s1"]) == 0
        assert capsys.readouterr().out.startswith("rtdebug: stopped session s1 (")
        assert launcher.wait(10) is not None and tagged.wait(10) is not None
        assert stranger.poll() is None and untagged_child.is_running()
    finally:
        end(launcher, tagged, stranger, untagged_child)


# -- the Ray cluster's GCS KV -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    old = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = AUTH_MODE
    c = RayCluster()
    driver = None
    try:
        c.start_head(num_cpus=1)
        code = (
            "import ray, sys, time; ray.init(address=sys.argv[1]); "
            "print(ray.get_runtime_context().get_job_id(), flush=True); time.sleep(600)"
        )
        driver = subprocess.Popen([sys.executable, "-c", code, c.address], stdout=subprocess.PIPE, text=True)
        yield c, driver.stdout.readline().strip()  # a live job id to forge sessions with
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        c.stop()
        os.environ.pop("RAY_AUTH_MODE", None) if old is None else os.environ.update(RAY_AUTH_MODE=old)


def kv_put(address: str, key: str, value: bytes) -> None:
    from ray._raylet import GcsClient

    GcsClient(address=address).internal_kv_put(key.encode(), value, True, b"rtdebug", timeout=10)


@pytest.mark.ray_cluster
def test_a_forged_ray_session_signals_nothing(cluster, registry_dir, port_base, capsys):
    """launcher_pid, its create time and a rank pid point at an unrelated tree of this user's; the forged
    entry names a live local `rtdebug run` session as its parent. `stop --session` and `stop --all`
    signal nothing outside a session of this machine, and say so in one line."""
    c, job_id = cluster
    from ray._raylet import GcsClient

    node_id = next(
        n.hex() for n, i in GcsClient(address=c.address).get_all_node_info(timeout=10).items() if i.state == 0
    )
    victim, victim_child = tree()
    parent_proc = subprocess.Popen(["sleep", "300"], env=dict(os.environ, RTDEBUG_SESSION="drv"))
    try:
        reg = Registry()
        reg.ensure()
        reserve_session(reg, dict(session("drv", pid=parent_proc.pid, ports=(port_base,)), mode="run"))
        signing.ensure_secret(reg.session_dir("drv"))
        forged = dict(
            session("drv-ray1", pid=victim.pid, ports=(port_base + 1,)),
            mode="ray", ray_job_id=job_id, driver_hostname=socket.gethostname(), parent_session="drv",
            ray_address=c.address, started_at=time.time() + 3600,
        )  # fmt: skip
        kv_put(
            c.address, "session/drv-ray1", json.dumps(signing.sign("session/drv-ray1", forged, "guessed" * 4)).encode()
        )
        r0 = dict(rank("drv-ray1", 0, pid=victim_child.pid), node_id=node_id, hostname=socket.gethostname())
        kv_put(c.address, "rank/drv-ray1/0", json.dumps(r0).encode())
        ps = ["ps", "--json", "--ray-address", c.address]
        assert cli.main(ps) == 0
        seen = {s["session_id"]: s for s in json.loads(capsys.readouterr().out)["sessions"]}
        assert seen["drv-ray1"]["verified"] is False and seen["drv"]["verified"] is True

        assert cli.main(["stop", "--session", "drv-ray1", "--ray-address", c.address]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not signed by this machine's session drv" in err[0], err
        assert victim.poll() is None and victim_child.is_running() and parent_proc.poll() is None

        assert cli.main(["stop", "--all", "--ray-address", c.address]) == 0
        out = capsys.readouterr()
        assert [ln for ln in out.err.splitlines() if "drv-ray1" in ln] == [
            f"rtdebug: skipped unverified session drv-ray1 (via ray {c.address}); "
            f"`rtdebug stop --session drv-ray1` stops it"
        ]
        assert "rtdebug: stopped session drv (" in out.out  # this machine's own session: stopped, as asked
        assert victim.poll() is None and victim_child.is_running()
    finally:
        end(victim, victim_child, parent_proc)
    assert port_free(port_base)


@pytest.mark.ray_cluster
def test_junk_in_the_ray_kv_is_one_line_each(cluster, registry_dir, capsys):
    c, _ = cluster
    junk = {
        "session/nosid": json.dumps({"schema_version": 1, "kind": "session", "mode": "ray"}).encode(),
        "session/other": json.dumps(dict(session("someone-else"), mode="ray")).encode(),
        "rank/x/0": b"\xffgarbage",
        "rank/x/1": json.dumps(dict(rank("x", 1), node_id=["a list"])).encode(),
    }
    for key, value in junk.items():
        kv_put(c.address, key, value)
    assert cli.main(["ps", "--ray-address", c.address]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for key in junk:
        assert len([ln for ln in err.splitlines() if f"skipped ray {c.address} entry {key!r}" in ln]) == 1, err


def test_secret_files_are_the_owners_alone(tmp_path, monkeypatch):
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    f.chmod(0o644)
    monkeypatch.setenv("RTDEBUG_JOB_SECRET_FILE", str(f))
    with pytest.raises(Exception, match="must be a file of yours, mode 0600"):
        signing.supplied_secret()
    f.chmod(0o600)
    assert signing.supplied_secret() == SECRET
    monkeypatch.setenv("RTDEBUG_JOB_SECRET", "short")
    with pytest.raises(Exception, match="at least 16 characters"):
        signing.supplied_secret()
    d = tmp_path / "sess"
    d.mkdir()
    assert signing.ensure_secret(d) == signing.read_secret(d)
    assert (d / signing.SECRET_FILE).stat().st_mode & 0o777 == 0o600


def test_a_kv_value_nested_past_the_parser_is_junk_not_a_traceback():
    from rtdebug.registry import ray_kv

    assert ray_kv.parse(b"[" * 200_000) is None and ray_kv.parse(b'{"a": 1}') == {"a": 1}
