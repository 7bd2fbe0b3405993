"""The endpoint in a real process: lazy until attach, breakpoints after, re-attach works, no second way in,
and a non-loopback endpoint lets in only allow-listed machines."""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from support.dap import DAPClient, DAPError
from support.jobs import read_ranks, wait_ranks
from support.paths import EXAMPLES, ROOT, marker_line, support_env
from support.ports import port_free
from support.wait import until

pytestmark = pytest.mark.e2e

PROGRAM = textwrap.dedent("""
    import sys, time
    from rtdebug.rank.endpoint import Endpoint
    ep = Endpoint("127.0.0.1", int(sys.argv[1]), on_state=lambda s: print("STATE", s, flush=True))
    ep.start(eager=sys.argv[2] == "eager")
    print("DEBUGPY_LOADED", "debugpy" in sys.modules, flush=True)
    def work(i):
        x = i * 2  # line 8
        return x
    for i in range(2000):
        work(i)
        time.sleep(0.01)
""")


def _listening(pid: int) -> list[int]:
    return sorted(c.laddr.port for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_attach_detach_reattach_with_one_listening_socket(tmp_path, port_base, mode):
    """pydevd is reached through a socketpair handoff: the checked port is the rank's only listener."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    log = open(tmp_path / "out.log", "w+")
    p = subprocess.Popen([sys.executable, str(script), str(port_base), mode], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _attempt in range(2):
            c = DAPClient("127.0.0.1", port_base)
            c.attach({str(script): [8]})
            stopped = c.wait_stopped(30)
            frame = c.top_frame(stopped["threadId"])
            assert frame["line"] == 8
            assert int(c.evaluate("x if 'x' in dir() else i", frame["id"])) >= 0
            assert _listening(p.pid) == [port_base]  # debugpy running, a client attached: still one
            c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
            c.continue_(stopped["threadId"])
            c.disconnect()
        log.seek(0)
        out = log.read()
        assert f"DEBUGPY_LOADED {mode == 'eager'}" in out
        assert out.count("STATE attached") == 2
    finally:
        p.kill()
        p.wait()
    assert port_free(port_base)


def test_a_silent_client_holds_up_no_one_and_is_refused_at_its_deadline(tmp_path, port_base):
    """The first message is read in the connection's own thread: a client that sends half a header and
    waits does not keep the owner's DAP client out, and is reset after ``dapgate.DEADLINE_S`` (5 s)."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    log = open(tmp_path / "out.log", "w+")
    p = subprocess.Popen([sys.executable, str(script), str(port_base), "eager"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "DEBUGPY_LOADED" not in (tmp_path / "out.log").read_text():  # listening (and debugpy up)
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "out.log").read_text()
            time.sleep(0.05)
        silent = socket.create_connection(("127.0.0.1", port_base), timeout=30)
        silent.sendall(b"Content-Len")
        c = DAPClient("127.0.0.1", port_base)
        c.attach({str(script): [8]})
        stopped = c.wait_stopped(30)
        log.seek(0)
        assert "refused" not in log.read()  # the owner got in while the silent client still waited
        c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
        c.continue_(stopped["threadId"])
        c.disconnect()
        try:
            assert silent.recv(100) == b""
        except ConnectionResetError:
            pass
        line = (
            f"rtdebug: port {port_base}: refused debug connection from 127.0.0.1:{silent.getsockname()[1]} "
            f"(uid {os.geteuid()}): no complete DAP message within 5 s"
        )
        deadline = time.monotonic() + 10  # the line follows the reset
        while line not in (out := (tmp_path / "out.log").read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in out, out
        assert out.count("STATE attached") == 1
        # part of the test, not a wait: the refusal log reports at most once a second, so a quiet second
        # makes the next refusal (in _pending_are_bounded) a line of its own
        time.sleep(1.1)
        _pending_are_bounded(port_base, tmp_path / "out.log")
        # and the owner still gets in, once the closed ones' reader threads have seen their EOF and freed
        # their slots (until then a new connection is the 65th and is reset, by design)
        deadline = time.monotonic() + 10
        while True:
            try:
                c = DAPClient("127.0.0.1", port_base)
                c.attach()
                c.disconnect()
                break
            except (OSError, DAPError):
                assert time.monotonic() < deadline, (tmp_path / "out.log").read_text()
                time.sleep(0.2)
    finally:
        p.kill()
        p.wait()


def _pending_are_bounded(port: int, log) -> None:
    """64 connections may be reading their first message at once; a 65th drops the oldest of them (reset),
    so half-open connections never keep a newer client out."""
    held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(64)]
    try:
        for s in held:
            s.sendall(b"C")
        line = f"{held[0].getsockname()[1]} (uid {os.geteuid()}): dropped for a newer connection (64 were half-open)"
        extra = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            assert held[0].recv(100) == b""  # the oldest is dropped for the newcomer
        except ConnectionResetError:
            pass
        deadline = time.monotonic() + 30
        while line not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        extra.close()
    finally:
        for s in held:
            s.close()


# -- allow-list: a real second machine, as two network namespaces joined by a veth pair ---------------

SERVER = textwrap.dedent("""
    import sys, time
    from rtdebug.rank.endpoint import Endpoint
    host, port, allow = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    listed = Endpoint(host, port, label="listed", allow=allow,
                      on_refused=lambda: print("REFUSED listed", listed.refused_count, flush=True))
    default = Endpoint(host, port + 1, label="default",
                       on_refused=lambda: print("REFUSED default", default.refused_count, flush=True))
    listed.start()
    default.start()
    print("READY", flush=True)
    def work(i):
        x = i * 2  # line 13
        return x
    for i in range(100000):
        work(i)
        time.sleep(0.01)
""")

CLIENT = textwrap.dedent('''
    """Run in the other namespace: raw `initialize` from given source addresses, then one real DAP session."""
    import json, socket, sys
    from support.dap import DAPClient
    job = json.loads(sys.argv[1])
    host = job["host"]
    body = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}).encode()
    def raw(port, source):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(10)
        try:  # a refusal resets the connection: that may reach this end as early as its connect
            s.connect((host, port))
            s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
            return s.recv(1000).decode("latin-1")
        except OSError as exc:
            return "error " + str(exc)
    out = {"raw": [raw(port, source) for port, source in job["raw"]]}
    d = job["dap"]
    c = DAPClient(host, d["port"], timeout=60)
    c.attach({d["file"]: [d["line"]]})
    stopped = c.wait_stopped(120)
    frame = c.top_frame(stopped["threadId"])
    out["line"] = frame["line"]
    out["value"] = c.evaluate(d["expr"], frame["id"])
    c.request("setBreakpoints", source={"path": d["file"]}, breakpoints=[])
    c.continue_(stopped["threadId"])
    c.disconnect()
    print(json.dumps(out))
''')
REFUSED = ("", "error [Errno 104] Connection reset by peer")  # closed unread (maybe reset), never a reply


def _from_other_host(ns: str, tmp_path, job: dict) -> dict:
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, str(client), json.dumps(job)],
        cwd=ROOT,
        env=support_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def two_hosts():
    """Namespaces ``a`` (10.231.N.1) and ``b`` (10.231.N.2, extra address .3): each other's only peer."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make network namespaces")
    tag = f"rtdacc{os.getpid() % 10000}{random.randrange(100)}"
    a, b, net = f"{tag}a", f"{tag}b", f"10.231.{random.randrange(256)}"
    made = []

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    try:
        for ns in (a, b):
            ip("netns", "add", ns)
            made.append(ns)
        ip("link", "add", f"v{tag}a", "netns", a, "type", "veth", "peer", "name", f"v{tag}b", "netns", b)
        for ns, addrs in ((a, [".1"]), (b, [".2", ".3"])):
            for suffix in addrs:
                ip("-n", ns, "addr", "add", f"{net}{suffix}/29", "dev", f"v{tag}{ns[-1]}")
            ip("-n", ns, "link", "set", f"v{tag}{ns[-1]}", "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {exc.stderr.strip()}")
    yield a, b, net
    for ns in made:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_allow_list_admits_only_listed_remote_addresses(tmp_path, two_hosts):
    """Peers in another network namespace have no row in the endpoint's /proc/net/tcp, exactly like a
    peer on another machine: only the allow-list decides. 10.231.N.2 is listed, .3 (same machine) is not,
    and an endpoint with the default list (its own addresses) lets neither in."""
    a, b, net = two_hosts
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    port = random.randrange(20000, 40000)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    log = open(tmp_path / "server.log", "w+")
    p = subprocess.Popen(
        ["ip", "netns", "exec", a, sys.executable, str(server), f"{net}.1", str(port), f"{net}.2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while "READY" not in (tmp_path / "server.log").read_text():
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        got = _from_other_host(
            b,
            tmp_path,
            {
                "host": f"{net}.1",
                "raw": [[port, f"{net}.3"], [port + 1, f"{net}.2"]],
                "dap": {"port": port, "file": str(server), "line": 13, "expr": "port"},
            },
        )
        assert all(reply in REFUSED for reply in got["raw"]), got
        assert got["line"] == 13 and got["value"] == str(port)  # the server's own variable, via the debugger
        out = (tmp_path / "server.log").read_text()
        assert f"rtdebug: listed: refused debug connection from {net}.3:" in out
        assert f"(uid unknown): not on the debug allow-list ({net}.2)" in out
        assert f"rtdebug: default: refused debug connection from {net}.2:" in out
        assert "(uid unknown): not on the debug allow-list (this host's own addresses)" in out
        assert "REFUSED listed 1" in out and "REFUSED default 1" in out
    finally:
        p.kill()
        p.wait()


def test_torchrun_debug_allow_reaches_the_ranks(tmp_path, two_hosts, registry_dir):
    """`rtdebug torchrun --debug-host <non-loopback> --debug-allow <peer>` on one "machine", a client on the
    other: the flag travels to every rank (RTDEBUG_ALLOW), the warning stays, refusals are counted."""
    a, b, net = two_hosts
    script = EXAMPLES / "plain_ddp.py"
    line = marker_line(script, "plain step")
    base = random.randrange(20000, 40000)
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(registry_dir), PYTHONUNBUFFERED="1")
    log = tmp_path / "job.log"
    with open(log, "wb") as f:
        p = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                a,
                sys.executable,
                "-m",
                "rtdebug",
                "torchrun",
                "--debug-host",
                f"{net}.1",
                "--debug-allow",
                f"{net}.2/32",
                "--debug-port-base",
                str(base),
                "--wait",
                "1",
                "--nproc-per-node",
                "2",
                str(script),
                "--epochs",
                "1",
                "--samples",
                "32",
            ],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "rtdebug: session " not in log.read_text():
            assert p.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        sid = log.read_text().split("rtdebug: session ", 1)[1].split()[0]
        wait_ranks(registry_dir, sid, 2)
        got = _from_other_host(
            b,
            tmp_path,
            {
                "host": f"{net}.1",
                "raw": [[base, f"{net}.3"]],
                "dap": {"port": base + 1, "file": str(script), "line": line, "expr": "dist.get_rank()"},
            },
        )
        assert got["raw"][0] in REFUSED and got["line"] == line and got["value"] == "1", got
        assert p.wait(timeout=180) == 0, log.read_text()[-3000:]
        out = log.read_text()
        assert f"rtdebug: warning: debug endpoints bind {net}.1" in out
        assert f"rtdebug: rank 0: refused debug connection from {net}.3:" in out
        assert f"(uid unknown): not on the debug allow-list ({net}.2/32)" in out
        ranks = read_ranks(registry_dir, sid)
        assert {r: e["refused_count"] for r, e in ranks.items()} == {0: 1, 1: 0}
        assert ranks[1]["attach_count"] == 1
    finally:
        for child in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else []:
            child.kill()
        p.kill()
        p.wait()


# -- the last client leaves and the next comes at once (VS Code's restart): the entry never says ready ----

RECONNECT = textwrap.dedent("""
    import random, sys, threading, time
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState
    from rtdebug.registry.files import Registry
    port, root, sid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    reg = Registry(root)
    reg.session_dir(sid).mkdir(parents=True)
    record = RankState(reg, sid, 0, "127.0.0.1", port, False, "prog.py")
    ep = Endpoint("127.0.0.1", port)
    record.connect(ep)
    write = ep.on_state
    def report(state):  # its thread loses the GIL for up to 5 ms first, as in a rank whose other threads are busy
        time.sleep(random.uniform(0, 0.005))
        write(state)
    ep.on_state = report
    ep.start(eager=True)
    record.ready(ep)
    print("READY", flush=True)
    def serving(f):  # a client's thread of the endpoint (its gate, relay, then its report of the client leaving)
        while f is not None and not (f.f_code.co_name == "_serve" and f.f_globals["__name__"].startswith(ENDPOINT)):
            f = f.f_back
        return f is not None
    ENDPOINT = "rtdebug.rank.endpoint"
    def answer():
        for _ in sys.stdin:  # a line in, a count out (pydevd hides its daemon threads from threading.enumerate)
            print(sum(serving(f) for f in sys._current_frames().values()), flush=True)
    threading.Thread(target=answer, daemon=True).start()
    while True:  # the rank trains: its main thread wants the GIL back from every other thread at once
        sum(i * i for i in range(1000))
""")
INITIALIZE = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}).encode()


def _connecting(port: int) -> socket.socket:
    """A client that sent all of DAP's ``initialize`` but its last byte: the endpoint's gate still reads it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((b"Content-Length: %d\r\n\r\n" % len(INITIALIZE) + INITIALIZE)[:-1])
    return s


def _initialized(s: socket.socket) -> socket.socket:
    """Send the last byte and read debugpy's answer: the endpoint has counted this client attached."""
    s.sendall(INITIALIZE[-1:])
    got = b""
    while b'"command": "initialize"' not in got and b'"command":"initialize"' not in got:
        chunk = s.recv(65536)
        assert chunk, f"closed before the initialize response: {got[-500:]!r}"
        got += chunk
    return s


def test_a_client_that_comes_as_the_last_one_leaves_is_never_overwritten_by_ready(tmp_path, port_base):
    """The client leaves and the next connects at once, 300 times (each relay's leaving and the next's
    arrival overlap at every timing the machine gives): whenever a client is attached and the one before
    has finished leaving, the entry -- read as ``ps`` reads it -- says ``attached``, never ``ready``; and
    once the last leaves it says ``ready``."""
    from rtdebug.registry.files import Registry

    root, sid = tmp_path / "registry", "race"
    script = tmp_path / "prog.py"
    script.write_text(RECONNECT)
    log = open(tmp_path / "out.log", "w+")
    p = subprocess.Popen([sys.executable, str(script), str(port_base), str(root), sid], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
    assert p.stdin is not None and p.stdout is not None

    def relays() -> int:
        p.stdin.write("?\n")
        p.stdin.flush()
        return int(p.stdout.readline())

    def entry() -> dict:
        (rank,) = Registry(root).ranks(sid)
        return rank

    try:
        assert p.stdout.readline() == "READY\n", (tmp_path / "out.log").read_text()
        client = _initialized(_connecting(port_base))
        for i in range(300):
            nxt = _connecting(port_base)  # its gate waits on the last byte: it comes in as the other leaves
            client.close()
            client = _initialized(nxt)
            until(relays, 30, "the client before has finished leaving", ok=lambda n: n == 1)
            e = entry()
            assert (e["state"], e["attach_count"]) == ("attached", i + 2), f"reconnect {i}: {e}"
        client.close()
        until(entry, 30, "ready once the last client left", ok=lambda e: e["state"] == "ready" and relays() == 0)
    finally:
        p.kill()
        p.wait()
        log.close()
    assert port_free(port_base)
