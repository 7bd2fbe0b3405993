"""rtdebug.common.access: peer uid from /proc/net/tcp{,6} on real sockets, allow-lists, and a real job that a
foreign uid cannot get into (while the owner still can)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rtdebug.common import access, sockdiag
from rtdebug.common.access import AllowList, check, peer_uid, proc_peer_uid, tcp_rows
from rtdebug.common.addresses import own_addresses, parse_allow
from rtdebug.common.config import RankConfig
from rtdebug.common.errors import HarnessError

from support.dap import DAPClient
from support.jobs import read_ranks, rtdebug, wait_ranks
from support.paths import EXAMPLES, marker_line
from support.users import NOBODY, SETPRIV, needs_setpriv

# A stdlib-only python the unprivileged uid can run (the venv may live under an unreadable home).
FOREIGN_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _pair(family: int = socket.AF_INET, host: str = "127.0.0.1"):
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind((host, 0))
    srv.listen(4)
    cli = socket.create_connection(srv.getsockname()[:2])
    conn, _ = srv.accept()
    return srv, cli, conn


def test_peer_uid_of_own_ipv4_socket():
    srv, cli, conn = _pair()
    with srv, cli, conn:
        assert peer_uid(conn.getsockname(), conn.getpeername()) == os.geteuid()
        assert check(conn, AllowList()) is None
        # the lookup is by the peer's 4-tuple: our own accepted socket's row is not mistaken for it
        rows = [r for r in tcp_rows() if r[0][1] == conn.getsockname()[1] and r[1][1] == cli.getsockname()[1]]
        assert len(rows) == 1 and rows[0][3] != 0
        # the port prefilter keeps exactly the rows a full decode would pick (here: the peer's)
        peer_port, our_port = cli.getsockname()[1], conn.getsockname()[1]
        full = [r for r in tcp_rows() if r[0][1] == peer_port and r[1][1] == our_port]
        assert list(tcp_rows(ports=(peer_port, our_port))) == full
        assert len(full) == 1 and full[0][0] == (ipaddress.ip_address("127.0.0.1"), peer_port)
        assert full[0][2] == os.geteuid()


def test_peer_uid_of_own_ipv6_socket():
    if not socket.has_ipv6 or not any(a == ipaddress.ip_address("::1") for a in own_addresses()):
        pytest.skip("no ::1 here")
    srv, cli, conn = _pair(socket.AF_INET6, "::1")
    with srv, cli, conn:
        assert peer_uid(conn.getsockname(), conn.getpeername()) == os.geteuid()
        assert proc_peer_uid(conn.getsockname(), conn.getpeername()) == os.geteuid()


def test_closed_peer_is_not_found_and_refused():
    """A peer that closed before the check leaves an ownerless row (the kernel shows uid 0): refused."""
    srv, cli, conn = _pair()
    cli.close()
    with srv, conn:
        assert peer_uid(conn.getsockname(), conn.getpeername()) is None
        refusal = check(conn, AllowList())
        assert refusal is not None and "could not be found" in refusal.reason


def test_sockdiag_asks_the_kernel_for_exactly_the_peer_socket():
    """One netlink request for the peer's 4-tuple gives what the /proc rows say (state, uid, inode)."""
    srv, cli, conn = _pair()
    d = sockdiag.SockDiag()
    with srv, cli, conn, contextlib.closing(d):
        ours, peer = conn.getsockname(), conn.getpeername()
        assert d.owner_uid(ours, peer) == proc_peer_uid(ours, peer) == os.geteuid()
        (row,) = tcp_rows(ports=(peer[1], ours[1]))
        assert d.lookup(peer, ours) == (1, row[2], row[3])  # TCP_ESTABLISHED
        assert d.lookup(ours, peer)[2] != row[3]  # our own end is another socket
        assert d.lookup(("127.0.0.1", 1), ours) is None  # nobody there
        assert d.lookup(srv.getsockname(), ("0.0.0.0", 0))[0] == sockdiag.TCP_LISTEN
        cli.close()
        assert d.owner_uid(ours, peer) is None  # closed: an orphan without a file (inode 0) is no owner


def test_without_socket_diag_the_peer_is_read_from_proc(monkeypatch):
    class NoDiag(sockdiag.SockDiag):
        def lookup(self, local, remote):  # a kernel without tcp_diag: ENOENT for every socket
            return None

    srv, cli, conn = _pair()
    with srv, cli, conn:
        with pytest.raises(sockdiag.Unavailable):
            NoDiag().owner_uid(conn.getsockname(), conn.getpeername())
        monkeypatch.setattr(sockdiag, "shared", lambda: NoDiag())
        monkeypatch.setattr(access, "_diag_broken", False)
        assert peer_uid(conn.getsockname(), conn.getpeername()) == os.geteuid()
        assert access._diag_broken  # asked once; /proc from then on
        assert check(conn, AllowList()) is None


@needs_setpriv
def test_peer_uid_of_foreign_socket():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        hold = f"import socket,time; s=socket.create_connection(('127.0.0.1',{port})); time.sleep(30)"
        p = subprocess.Popen([*SETPRIV, FOREIGN_PY, "-c", hold])
        try:
            srv.settimeout(30)
            conn, _ = srv.accept()
            with conn:
                assert peer_uid(conn.getsockname(), conn.getpeername()) == NOBODY
                assert proc_peer_uid(conn.getsockname(), conn.getpeername()) == NOBODY  # the fallback agrees
                refusal = check(conn, AllowList())
                assert refusal is not None and refusal.uid == NOBODY
                assert (
                    refusal.line.startswith("refused debug connection from 127.0.0.1:")
                    and f"(uid {NOBODY}): its socket belongs to another user" in refusal.line
                )
        finally:
            p.kill()
            p.wait()


def test_allow_list_matching():
    nets = parse_allow("10.0.0.0/8, 192.168.1.7,fd00::/8")
    assert [str(n) for n in nets] == ["10.0.0.0/8", "192.168.1.7/32", "fd00::/8"]
    allow = AllowList("10.0.0.0/8,192.168.1.7")
    ip = ipaddress.ip_address
    assert allow.allows(ip("10.200.3.4")) and allow.allows(ip("192.168.1.7"))
    assert not allow.allows(ip("192.168.1.8")) and not allow.allows(ip("11.0.0.1"))
    assert not allow.allows(ip("fd00::1"))
    default = AllowList("")
    mine = sorted(own_addresses(), key=str)
    assert mine and all(default.allows(a) for a in mine)
    assert not default.allows(ip("203.0.113.9"))  # TEST-NET-3: never one of ours


@pytest.mark.parametrize("spec", ["10.0.0.0/33", "bogus", "10.0.0.1,,300.1.1.1"])
def test_bad_cidr_is_a_one_line_usage_error(spec):
    bad = [s for s in spec.split(",") if s and not s.startswith("10.0.0.1")][0]
    with pytest.raises(HarnessError) as err:
        RankConfig(session_id="s", allow=spec)
    assert err.value.exit_code == 2
    assert err.value.message == (
        f"--debug-allow/--allow: {bad!r} is not an IP address or CIDR (e.g. 10.0.0.0/8 or 192.168.1.7)"
    )


def test_allow_round_trips_through_env():
    cfg = RankConfig(session_id="s", allow="10.0.0.0/8,::1")
    assert RankConfig.from_env(cfg.to_env()).allow == "10.0.0.0/8,::1"


def test_cli_rejects_bad_allow_before_starting_anything(tmp_path, registry_dir):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    r = rtdebug("torchrun", "--debug-allow", "10.1.2.0/40", "--nproc-per-node", "1", str(script))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "rtdebug: error: --debug-allow/--allow: '10.1.2.0/40' is not an IP address "
        "or CIDR (e.g. 10.0.0.0/8 or 192.168.1.7)"
    )
    assert "ran" not in r.stdout
    r = rtdebug("run", "--allow", "x.y", str(script))
    assert r.returncode == 2 and r.stderr.startswith("rtdebug: error: --debug-allow/--allow: 'x.y' is not")
    assert not registry_dir.exists() or not any(registry_dir.iterdir())


# -- a foreign uid against a real 2-rank job -------------------------------------------------------

INTRUDER = textwrap.dedent("""
    import json, os, socket, sys
    out = []
    body = json.dumps({"seq": 1, "type": "request", "command": "initialize",
                       "arguments": {"adapterID": "debugpy", "clientID": "intruder"}}).encode()
    for port in map(int, sys.argv[1:]):
        r = {"port": port, "connected": False, "reply": ""}
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            r["connected"] = True
            s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
            s.settimeout(4)
            data = b""
            try:
                while b"\\r\\n\\r\\n" not in data or len(data) < 200:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            r["reply"] = data[:300].decode("latin-1")
            s.close()
        except OSError as exc:
            r["error"] = str(exc)
        out.append(r)
    print(json.dumps({"uid": os.getuid(), "results": out}))
""")


def _listening_ports(pids: list[int]) -> dict[int, list[int]]:
    return {
        pid: sorted(
            {c.laddr.port for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN}
        )
        for pid in pids
    }


def _intrude(ports: list[int]) -> list[dict]:
    r = subprocess.run(
        [*SETPRIV, FOREIGN_PY, "-c", INTRUDER, *map(str, ports)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["uid"] == NOBODY  # it really ran as the other user
    return out["results"]


def _wait_refused(registry_dir, sid, want: int, timeout: float = 30) -> dict[int, dict]:
    deadline = time.monotonic() + timeout
    while True:
        ranks = read_ranks(registry_dir, sid)
        if all(r.get("refused_count") == want for r in ranks.values()) or time.monotonic() > deadline:
            return ranks
        time.sleep(0.1)


@pytest.mark.e2e
@needs_setpriv
def test_foreign_uid_gets_into_no_rank_port_and_owner_still_attaches(job, registry_dir, port_base):
    script = EXAMPLES / "plain_ddp.py"
    line = marker_line(script, "plain step")
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--wait",
        "all",
        "--nproc-per-node",
        "2",
        str(script),
        "--epochs",
        "1",
        "--samples",
        "64",
    )
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    pids = {r["rank"]: r["pid"] for r in ranks.values()}

    # 1. ranks waiting for a debugger (debugpy already started for --wait): every listening port
    before = _listening_ports(list(pids.values()))
    assert before == {pids[0]: [port_base], pids[1]: [port_base + 1]}
    results = _intrude([p for ports in before.values() for p in ports])
    assert [r["reply"] for r in results] == ["", ""], results
    ranks = _wait_refused(registry_dir, sid, 1)
    assert {r: e["refused_count"] for r, e in ranks.items()} == {0: 1, 1: 1}
    out = j.output()
    for rank in (0, 1):
        assert f"rtdebug: rank {rank}: refused debug connection from 127.0.0.1:" in out
    assert out.count(f"(uid {NOBODY}): its socket belongs to another user") == 2

    # 2. the owner attaches and stops at a breakpoint in each rank
    clients = {rank: DAPClient("127.0.0.1", port_base + rank) for rank in (0, 1)}
    for c in clients.values():
        c.attach({str(script): [line]})
    threads = {}
    for rank, c in clients.items():
        stopped = c.wait_stopped(120)
        threads[rank] = stopped["threadId"]
        assert c.evaluate("dist.get_rank()", c.top_frame(stopped["threadId"])["id"]) == str(rank)

    # 3. while stopped (debugger live, gloo up): every TCP port each rank listens on
    during = _listening_ports(list(pids.values()))
    ports = [p for ps in during.values() for p in ps]
    assert port_base in ports and port_base + 1 in ports
    results = _intrude(ports)
    assert [r for r in results if "Content-Length" in r["reply"]] == [], results
    ranks = _wait_refused(registry_dir, sid, 2)
    assert {r: e["refused_count"] for r, e in ranks.items()} == {0: 2, 1: 2}

    # 4. the owner's sessions are intact: continue, stop again at the next step, then finish
    for rank, c in clients.items():
        c.continue_(threads[rank])
    for c in clients.values():
        stopped = c.wait_stopped(120)
        assert c.top_frame(stopped["threadId"])["line"] == line
        c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
        c.continue_(stopped["threadId"])
    for c in clients.values():
        c.disconnect()
    assert j.wait(180) == 0, j.output()[-3000:]
