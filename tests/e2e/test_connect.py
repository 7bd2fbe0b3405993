"""``rtdebug connect`` end to end: a laptop that reaches a 2-node job only through a login node's sshd.

The hosts (``lap``, ``login``, ``n0``, ``n1``), their real sshd's and the laptop's ssh config are
``support.sshhosts``'s: the laptop reaches ``login`` alone; the nodes share a home (the per-user job secret),
the laptop has its own, so ``stacks`` from the laptop works only with the secret ``connect`` read over ssh.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from support.paths import EXAMPLES, PY, SCRIPTS, marker_line
from support.sigs import default_dispositions
from support.sshhosts import (
    BIND_ALL,
    Cluster,
    cluster_up,
    one_line_error,
    ps_json,
    ssh_processes,
    start_connect,
)
from support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

SCRIPT = SCRIPTS / "connect_steps.py"  # the ranks agree on the stop, so the job ends well
PROBE = SCRIPTS / "dap_probe.py"
RDZV_PORT = 29500


@pytest.fixture
def cluster(tmp_path):
    yield from cluster_up(tmp_path)


def test_bad_input_is_one_line_and_leaves_nothing(cluster):
    c = cluster
    assert "nosuchhost" in one_line_error(c, "nosuchhost", "--jump", "login")
    stranger = str(c.tmp / "ssh" / "stranger.conf")  # a key that no host authorizes
    assert "refused the login" in one_line_error(c, "node0", "--jump", "login", "--ssh-config", stranger)
    assert "AllowTcpForwarding" in one_line_error(c, "node0", "--jump", "nofwd")
    assert "no live rtdebug session on node0" in one_line_error(c, "node0", "--jump", "login")
    # laptop reaches node0 only through the jump host
    assert "cannot connect to node0" in one_line_error(c, "node0", "--ssh-option", "ConnectTimeout=3")
    # usage mistakes: exit 2, one line
    r = c.rtdebug("lap", "connect", "-oProxyCommand=x", timeout=60)
    assert r.returncode == 2, r


# -- the job -------------------------------------------------------------------------------------------------


def node_args(c: Cluster, node: str, stop: Path, nproc: int) -> list[str]:
    n0 = c.addr["n0"]
    rdzv = (f"--node_rank={0 if node == 'n0' else 1} --rdzv_backend=c10d --rdzv_endpoint={n0}:{RDZV_PORT} "
            f"--rdzv_id=job --rdzv-conf is_host={1 if node == 'n0' else 0}")  # fmt: skip
    return ["torchrun", "--nnodes=2", f"--nproc-per-node={nproc}", *rdzv.split(), "--local-addr", c.addr[node],
            str(SCRIPT), str(stop.parent), "0.05"]  # fmt: skip


def ready_ranks(c: Cluster, h: str) -> list[int]:
    r = c.rtdebug(h, "ps", "--json")
    if r.returncode != 0:
        return []
    return sorted(
        x["rank"] for s in json.loads(r.stdout)["sessions"] for x in s["ranks"] if x["state"] in ("ready", "attached")
    )


def start_job(c: Cluster, tmp: Path, nproc: int = 2) -> list[subprocess.Popen]:
    stop = tmp / "stop"
    nodes = [c.start(h, node_args(c, h, stop, nproc)) for h in ("n0", "n1")]
    until(lambda: ready_ranks(c, "n0"), 300, f"{2 * nproc} ready ranks seen from node 0",
          ok=lambda rs: len(rs) == 2 * nproc, every=1, context=c.trouble)  # fmt: skip
    return nodes


def attach_all(c: Cluster, ranks: list[int]) -> dict[int, str]:
    """A real DAP client per rank, all at once (as VS Code's Attach to All Ranks): each stops at the breakpoint
    and reads its rank, its RANK and its node's address; returns rank -> that text."""
    line = marker_line(SCRIPT, "connect step")
    probes = {}
    for n in ranks:
        a = c.rtdebug("lap", "attach", "--rank", str(n), "--json", "--timeout", "60")
        assert a.returncode == 0, a.stderr
        where = json.loads(a.stdout)
        assert where["host"] == "127.0.0.1", where
        expr = 'f\'{dist.get_rank()}|{os.environ["RANK"]}|{os.environ["NODE_ADDR"]}\''
        argv = ["ip", "netns", "exec", c.names["lap"], PY, str(PROBE), where["host"], str(where["port"]), str(SCRIPT),
                str(line), expr]  # fmt: skip
        probes[n] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=c.env("lap"),
                                    preexec_fn=default_dispositions)  # fmt: skip
    out = {}
    for n, p in probes.items():
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stdout + stderr
        probe = json.loads(stdout.strip().splitlines()[-1])
        assert probe["line"] == line, probe
        out[n] = probe["value"].strip("'\"")
    return out


def pid_column(table: str) -> dict[int, int]:
    """``rtdebug ps``'s rank rows: rank -> its PID column."""
    rows = [ln.split() for ln in table.splitlines()]
    return {int(w[0]): int(w[2]) for w in rows if len(w) > 2 and w[0].isdigit()}


def test_connect_through_a_jump_host_every_rank_of_two_nodes(cluster, tmp_path):
    c = cluster
    nodes = start_job(c, tmp_path)
    job = ps_json(c, "n0")["sessions"][0]
    node_of = {r["rank"]: r.get("node_ip", c.addr["n0"]) for r in job["ranks"]}

    # a stale local port (something still holds the port rank 0 would get): one line, nothing left
    holder = c.spawn("lap", PY, "-c", "import socket,sys,time\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen()\n"
                     "print(s.getsockname()[1],flush=True);time.sleep(3600)")  # fmt: skip
    busy = int(holder.stdout.readline())
    err = one_line_error(c, "node0", "--jump", "login", "--local-port-base", str(busy))
    assert f"local port {busy} (rank 0) is in use" in err, err
    holder.kill()

    conn = start_connect(c)
    listing = ps_json(c, "lap")
    (s,) = listing["sessions"]
    assert s["mode"] == "connected" and s["verified"] is True and s["session_id"] == job["session_id"]
    ranks = {r["rank"]: r for r in s["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3] and all(r["host"] == "127.0.0.1" for r in ranks.values())
    assert {r["tunnel"]["node"] for r in ranks.values()} == {"node0", c.addr["n1"]}
    assert not (c.tmp / "registry-lap" / s["session_id"] / "job.secret").exists()  # in memory only
    assert not list(c.lap_home.rglob("*secret*"))
    # ps on the laptop: each rank's own pid (on its node), never the ssh master's that carries its forward
    assert pid_column(c.rtdebug("lap", "ps").stdout) == {r["rank"]: r["pid"] for r in job["ranks"]}
    assert {r["rank"]: r["state"] for r in s["ranks"]} == {r["rank"]: r["state"] for r in job["ranks"]}

    # attach-all from the laptop: every rank stops at the breakpoint; rank 3 is node 1's and says RANK == 3
    values = attach_all(c, [0, 1, 2, 3])
    assert values == {n: f"{n}|{n}|{node_of[n]}" for n in range(4)}, values
    assert node_of[3] == c.addr["n1"]

    # stacks from the laptop: every rank, grouped, through the forwarded store and the secret in memory
    st = c.rtdebug("lap", "stacks", "--json", "--timeout", "20")
    assert st.returncode == 0, st.stderr
    snap = json.loads(st.stdout)
    assert sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1, 2, 3], snap
    text = c.rtdebug("lap", "stacks", "--timeout", "20")
    assert text.returncode == 0 and "connect_steps.py" in text.stdout, text.stderr

    # SIGKILL of connect: no ssh left, no port bound, the job runs on, the local session is seen ended
    ports = [r["port"] for r in ranks.values()]
    assert ssh_processes(conn.pid)
    killed_dirs = set(Path("/tmp").glob(f"rtdebug-connect-{conn.pid}-*"))  # its ssh control directory
    assert killed_dirs
    conn.send_signal(signal.SIGKILL)
    conn.wait(timeout=30)
    until(lambda: ssh_processes(conn.pid), 30, "no ssh process of connect left", ok=lambda ps: not ps)
    free = c.run("lap", PY, "-c", BIND_ALL, *map(str, ports))
    assert free.returncode == 0, free.stderr
    assert ps_json(c, "lap")["sessions"] == []
    stale = c.rtdebug("lap", "attach", "--rank", "3", "--timeout", "2")
    assert stale.returncode == 1 and len(stale.stderr.strip().splitlines()) == 1, stale.stderr
    assert ready_ranks(c, "n0") == [0, 1, 2, 3]

    # again: `rtdebug stop` on the laptop ends the connection only (the job runs on); the killed connect's
    # control directory is swept by this one
    conn = start_connect(c)
    assert not killed_dirs & set(Path("/tmp").glob("rtdebug-connect-*"))
    stop = c.rtdebug("lap", "stop", "--session", s["session_id"])
    assert stop.returncode == 0 and f"disconnected session {s['session_id']} from node0" in stop.stdout, stop
    assert conn.wait(timeout=60) == 0
    assert not ssh_processes(conn.pid) and ps_json(c, "lap", "--all")["sessions"] == []
    assert ready_ranks(c, "n0") == [0, 1, 2, 3]

    # and Ctrl-C: it says so, removes its session, closes every tunnel
    conn = start_connect(c)
    conn.send_signal(signal.SIGINT)
    assert conn.wait(timeout=60) == 0
    assert not ssh_processes(conn.pid) and ps_json(c, "lap", "--all")["sessions"] == []

    # connected when the job ends: connect sees it, closes everything and exits 0; the job ended well
    conn = start_connect(c)
    (tmp_path / "stop").write_text("")
    assert conn.wait(timeout=120) == 0
    assert "has ended on node0" in (c.tmp / "connect.log").read_text()
    assert not ssh_processes(conn.pid) and not [p for p in (c.tmp / "registry-lap").iterdir() if p.is_dir()]
    for p in nodes:
        assert p.wait(timeout=120) == 0, c.trouble()


# -- one node: no store, so stacks runs on the node, over connect's link ------------------------------------
HANG = EXAMPLES / "hang.py"
# a DAP initialize at 127.0.0.1:PORT; prints the response's command and success
INITIALIZE = """import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
body = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {"adapterID": "t"}}).encode()
s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
buf = b""
while True:
    while b"\\r\\n\\r\\n" not in buf:
        buf += s.recv(65536) or sys.exit("closed")
    head, _, buf = buf.partition(b"\\r\\n\\r\\n")
    n = int(head.split(b":")[1])
    while len(buf) < n:
        buf += s.recv(65536) or sys.exit("closed")
    msg, buf = json.loads(buf[:n]), buf[n:]
    if msg.get("type") == "response":
        print(msg["command"], msg["success"])
        break
"""


def hung(c: Cluster) -> dict | None:
    """node0's session once every rank waits in its collective #4 (the hang example's)."""
    sessions = ps_json(c, "n0")["sessions"]
    s = sessions[0] if sessions else None
    colls = [r.get("collective") or {} for r in s["ranks"]] if s else []
    return s if colls and all(x.get("seq") == 4 and x.get("state") == "entered" for x in colls) else None


def test_connect_to_a_one_node_job_stacks_verdict_and_ps_states(cluster):
    """A job on one node publishes no store: `stacks` from the laptop is the node's own, run over connect's
    link, with its verdict and the ranks' own pids; `ps` shows each rank's state, pid and collective as on
    the node; `stop` on the laptop disconnects (the job runs on)."""
    c = cluster
    c.start("n0", ["torchrun", "--pg-timeout", "300", "--nproc-per-node=3", str(HANG)])
    node = until(lambda: hung(c), 300, "3 ranks hung in collective #4 on node0", every=1, context=c.trouble)
    assert "store" not in node
    conn = start_connect(c)

    # ps: the states, pids and collectives of the node's ranks, and its pg-timeout
    (s,) = ps_json(c, "lap")["sessions"]
    assert s["mode"] == "connected" and s["session_id"] == node["session_id"]
    mine, theirs = ({r["rank"]: r for r in x["ranks"]} for x in (s, node))
    for n, r in mine.items():
        assert r["state"] == theirs[n]["state"] and r["tunnel"]["remote_pid"] == theirs[n]["pid"], (r, theirs[n])
        assert r["collective"] == theirs[n]["collective"] and r["pid"] != theirs[n]["pid"]  # (pid: its link here)
    table = c.rtdebug("lap", "ps").stdout
    assert pid_column(table) == {n: r["pid"] for n, r in theirs.items()}, table
    line = marker_line(HANG, "hang barrier")
    assert "pg-timeout 300s" in table and f"in BARRIER #4 (hang.py:{line})" in table, table

    # attach: rank 1 at its local port, and a DAP client there gets its debugger's answer through the tunnel
    a = c.rtdebug("lap", "attach", "--rank", "1", "--json", "--timeout", "30")
    assert a.returncode == 0 and json.loads(a.stdout)["port"] == mine[1]["port"], a
    hello = c.run("lap", PY, "-c", INITIALIZE, str(mine[1]["port"]), timeout=120)
    assert hello.stdout.strip() == "initialize True", hello

    # stacks --json: every rank, grouped, the verdict naming rank 1 (as on the node); the node's pids
    st = c.rtdebug("lap", "stacks", "--json", "--timeout", "20")
    assert st.returncode == 0, st.stderr
    snap, there = json.loads(st.stdout), json.loads(c.rtdebug("n0", "stacks", "--json", "--timeout", "20").stdout)
    assert [g["ranks"] for g in snap["groups"]] == [[0, 2], [1]], snap
    assert snap["culprit"] == there["culprit"] == 1 and snap["verdict"] == there["verdict"], snap["verdict"]
    assert snap["verdict"].startswith(f"rank 1 is in BARRIER #4 (hang.py:{line})"), snap["verdict"]
    assert [g["label"] for g in snap["groups"]] == [g["label"] for g in there["groups"]]
    assert snap["source"] == "ssh link to node0" and snap["session_id"] == node["session_id"]
    text = c.rtdebug("lap", "stacks", "--history", "4", "--timeout", "20")
    assert text.returncode == 0 and text.stdout.startswith(snap["verdict"] + "\n"), text
    assert "(every rank of the job, through the ssh link to node0)" in text.stdout
    assert "<- first divergence" in text.stdout, text.stdout
    bad = c.rtdebug("lap", "stacks", "--rank", "7")  # the node's usage error, said as the user's
    assert bad.returncode == 2, bad
    assert bad.stderr.strip() == "rtdebug: error: invalid --rank value '7': rank 7 >= world size 3", bad.stderr

    # a rank stopped on the node (SIGSTOP) is unresponsive, named with its own pid there
    rank1 = theirs[1]["pid"]
    os.kill(rank1, signal.SIGSTOP)
    try:
        stopped = json.loads(c.rtdebug("lap", "stacks", "--json", "--timeout", "5").stdout)
    finally:
        os.kill(rank1, signal.SIGCONT)
    assert stopped["unresponsive_detail"] == [
        {"rank": 1, "pid": rank1, "reason": "process is stopped (SIGSTOP or a tracer)"}
    ], stopped

    # stop on the laptop ends connect only: the job's ranks are still hung on node0
    stop = c.rtdebug("lap", "stop")
    assert stop.returncode == 0 and "the job runs on there" in stop.stdout, stop
    assert conn.wait(timeout=60) == 0 and not ssh_processes(conn.pid)
    assert ps_json(c, "lap", "--all")["sessions"] == [] and hung(c) is not None
