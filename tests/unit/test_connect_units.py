"""``rtdebug connect``'s parts without a network: the remote listing read as hostile input, ssh's errors in one
line, the options' checks, and the secret socket (a real unix socket and a real second uid)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtdebug.cli import main
from rtdebug.common.errors import HarnessError
from rtdebug.connect import listing
from rtdebug.connect.secretsock import SecretServer
from rtdebug.connect.transport import Forward, check_node_name, explain, last_line
from rtdebug.registry import signing
from rtdebug.registry.entry import problem


def rank(n: int, **kw) -> dict:
    e = dict(schema_version=1, kind="rank", session_id="s1", rank=n, pid=100 + n, create_time=1.0, state="ready",
             host="127.0.0.1", port=5678 + n, world_size=4, local_rank=n % 2, node_rank=n // 2)  # fmt: skip
    return {**e, **kw}


def session(ranks: list[dict], **kw) -> dict:
    e = dict(schema_version=1, kind="session", session_id="s1", mode="torchrun", launcher_pid=1,
             launcher_create_time=1.0, state="running", host="127.0.0.1", ports=[5678], started_at=1.0,
             script="train.py", ranks=ranks)  # fmt: skip
    return {**e, **kw}


def ps(*sessions: dict, registry: object = "/home/u/.rtdebug/registry") -> bytes:
    return json.dumps({"schema_version": 1, "registry": registry, "sessions": list(sessions)}).encode()


def test_a_two_node_listing_names_each_rank_s_node_and_the_home_node():
    ranks = [rank(0), rank(1), rank(2, node_ip="10.0.0.2"), rank(3, node_ip="10.0.0.2")]
    nodes = [{"node_rank": 0, "node_ip": "10.0.0.1", "session_id": "s1"}, {"node_rank": 1, "node_ip": "10.0.0.2"}]
    got = listing.parse(ps(session(ranks, nodes=nodes, store="10.0.0.1:29500")), "node0")
    (s,) = got.sessions
    assert s.home_node == 0 and s.nodes == {0: "10.0.0.1", 1: "10.0.0.2"} and s.store == ("10.0.0.1", 29500)
    assert [r.node_rank for r in s.ranks] == [0, 0, 1, 1]
    assert listing.choose(got, None, "node0") is s and listing.choose(got, "s1", "node0") is s


def test_only_whitelisted_rank_fields_reach_the_local_entry():
    stacks = {"request": "../../etc/passwd", "answer": "x", "main_thread": "0x1", "bottom": ["a", "b"]}
    stop = {"kind": "step", "reason": "x"}
    r = rank(0, stacks=stacks, collectives={"file": "/etc/shadow"}, evil="yes", lazy="not a bool", stop=stop)
    (s,) = listing.parse(ps(session([r])), "h").sessions
    e = s.ranks[0].entry
    assert "stacks" not in e and "collectives" not in e and "evil" not in e and "lazy" not in e
    assert e["stop"] == {"kind": "step", "reason": "x", "origin": None}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "printed nothing"),
        (b"\x00\xff garbage", "not JSON"),
        (b"[]", "schema-1 listing"),
        (json.dumps({"schema_version": 2, "registry": "/r", "sessions": []}).encode(), "schema-1 listing"),
        (ps(registry="relative/path"), "registry path"),
        (ps(registry="/r/../../etc"), "registry path"),
        (ps(registry="/r\n; rm -rf ~"), "registry path"),
        (ps(registry="/r/$(id)"), "registry path"),
        (ps(session([], session_id="../x")), "not valid"),
        (ps(session([rank(0, port=0)])), "bad address"),
        (ps(session([rank(0, host="-oProxyCommand=x")])), "bad address"),
        (ps(session([rank(0, host="a b")])), "bad address"),
        (ps(session([rank(0, node_ip="$(id)")])), "bad node address"),
        (ps(session([rank(0), rank(0)])), "listed twice"),
        (ps(session([rank(0, rank="0")])), "not valid"),
        (ps(session([rank(0)], store="10.0.0.1")), "HOST:PORT"),
        (ps(dict(session([]), ranks="x")), "rank list"),
        (ps(session([rank(0)], nodes=[{"node_rank": True}])), "node entry"),
        (b"[" * 100000, "not JSON"),
    ],
)
def test_hostile_listings_are_one_line(raw, why):
    with pytest.raises(HarnessError) as exc:
        listing.parse(raw, "node0")
    assert why in exc.value.message and exc.value.message.startswith("node0: ") and "\n" not in exc.value.message


def test_choosing_a_session_is_one_line_when_there_is_none():
    empty = listing.parse(ps(), "node0")
    with pytest.raises(HarnessError, match="^no live rtdebug session on node0$"):
        listing.choose(empty, None, "node0")
    unverified = listing.parse(ps(session([rank(0)], verified=False)), "node0")
    with pytest.raises(HarnessError, match="only unverified sessions"):
        listing.choose(unverified, None, "node0")
    assert listing.choose(unverified, "s1", "node0").session_id == "s1"
    with pytest.raises(HarnessError, match="no live rtdebug session 'other' on node0"):
        listing.choose(unverified, "other", "node0")
    ended = listing.parse(ps(session([rank(0)], state="exited")), "node0")
    assert ended.sessions == []


@pytest.mark.parametrize(
    ("stderr", "says"),
    [
        ("ssh: Could not resolve hostname nosuch: Name or service not known\r\n", "cannot reach nosuch"),
        ("root@10.0.0.2: Permission denied (publickey).\nkex_exchange_identification: closed\n", "refused the login"),
        ("channel 0: open failed: administratively prohibited: open failed\nstdio forwarding failed\n", "AllowTcp"),
        ("Host key verification failed.\n", "host key verification failed"),
        ("ssh: connect to host 10.0.0.9 port 22: Connection timed out\n", "cannot connect to nosuch"),
        ("", "ssh exited"),
    ],
)
def test_ssh_errors_become_one_line(stderr, says):
    line = explain(stderr, "nosuch", ["login"])
    assert says in line and "\n" not in line and "\r" not in line


def test_last_line_drops_control_characters_and_known_host_notes():
    assert last_line("Warning: Permanently added 'x'\nreal \x1b[31mreason\x07\n") == "real ?[31mreason?"


def test_node_names_are_never_options():
    for bad in ("-oProxyCommand=x", "a b", "a;b", "", "x" * 300, "$(id)"):
        with pytest.raises(HarnessError):
            check_node_name(bad)
    for good in ("node0", "user@host.example", "10.0.0.1", "[::1]", "gpu-17.cluster"):
        assert check_node_name(good) == good
    assert Forward(4000, "::1", 22).spec() == "127.0.0.1:4000:[::1]:22"


@pytest.mark.parametrize(
    "argv",
    [
        ["-oProxyCommand=x"],
        ["node0", "--jump", "a,-oProxyCommand=x"],
        ["node0", "--store", "nope"],
        ["node0", "--session", "s1", "--store", "h:1"],
        ["node0", "--refresh", "0"],
        ["node0", "--local-port-base", "80"],
        ["node0", "--ssh-option=-F/etc/passwd"],
        ["node0", "--remote-rtdebug", ""],
        ["node0", "--ray-address", "10.0.0.1:6379", "--store", "10.0.0.1:29500"],
        ["node0", "--ray-address", "auto"],
        ["node0", "--ray-address", "10.0.0.1:99999"],
        ["node0", "--refresh", "nan"],
        ["node0", "--refresh", "inf"],
        ["node0", "--refresh", "1e-9"],
        ["node0", "--jump", ""],
        ["node0", "--jump", ",,"],
        ["node0", "--remote-rtdebug", '"'],
    ],
)
def test_usage_mistakes_exit_2_in_one_line(argv, capsys):
    assert main(["connect", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # ours and argparse's alike: one line
    assert len(err) == 1 and err[0].startswith("rtdebug: error:"), err


def test_local_entries_are_schema_entries(tmp_path):
    """What connect writes is a registry entry every reader takes (mode connected, tunnel)."""
    from rtdebug.connect.session import Connection, Options
    from rtdebug.registry.files import Registry

    class FakeLink:
        node, pid, create_time = "node0", os.getpid(), 1.0

    conn = Connection(transport=None, opts=Options(host="node0"), registry=Registry(tmp_path))  # type: ignore[arg-type]
    (s,) = listing.parse(ps(session([rank(0)])), "node0").sessions
    e = conn._rank_entry(s.ranks[0], "node0", FakeLink(), 40000)  # type: ignore[arg-type]
    assert problem(e, "rank") is None and e["host"] == "127.0.0.1" and e["port"] == 40000
    assert e["tunnel"] == {"node": "node0", "remote_host": "127.0.0.1", "remote_port": 5678, "remote_pid": 100}
    schema = json.loads(Path(signing.__file__).with_name("registry.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(e, schema)


def test_the_secret_socket_answers_its_own_user_only(tmp_path):
    d = tmp_path / ("d" * 150)  # longer than a socket address may be: bound through /proc/self/fd
    d.mkdir(mode=0o700)
    server = SecretServer(d, "s" * 40)
    try:
        assert signing.read_secret(d) == "s" * 40
        assert signing.known_secrets([d]).count("s" * 40) == 1
        if os.geteuid() == 0:  # another uid, given a way in to the directory, gets nothing
            d.chmod(0o755)
            tmp_path.chmod(0o755)
            code = "from pathlib import Path; from rtdebug.registry import signing\n"
            code += f"print(signing.read_secret(Path({str(d)!r})))"
            other = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                capture_output=True, text=True, timeout=60,
                env=dict(os.environ, PYTHONPATH=str(Path(signing.__file__).parents[2])),  # rtdebug, as nobody
            )  # fmt: skip
            assert other.stdout.strip() == "None", other.stdout + other.stderr
    finally:
        server.close()
    assert not (d / signing.SECRET_SOCKET).exists() and signing.read_secret(d) is None


class FakeLink:
    """A link whose forwards are a set: what sync asks of a transport, without ssh."""

    def __init__(self, node: str) -> None:
        self.node, self.pid, self.create_time = node, os.getpid(), __import__("psutil").Process().create_time()
        self.forwards: set[Forward] = set()
        self.up = True

    def run(self, argv, timeout):
        raise AssertionError("not in this test")

    def forward(self, forwards):
        self.forwards.update(forwards)

    def cancel(self, forwards):
        self.forwards.difference_update(forwards)

    def alive(self):
        return self.up

    def close(self):
        self.up = False
        self.forwards.clear()


class FakeTransport:
    label = "fake"

    def __init__(self) -> None:
        self.opened: list[FakeLink] = []

    def open(self, node, timeout=0):
        return self.open_many([node])[node]

    def open_many(self, nodes, timeout=0):
        links = {n: FakeLink(n) for n in nodes}
        self.opened += links.values()
        return links

    def close(self):
        pass


def test_sync_follows_ranks_that_appear_move_and_end(tmp_path):
    from rtdebug.connect.session import Connection, Options
    from rtdebug.registry.files import Registry
    from rtdebug.views.api import Views

    reg = Registry(tmp_path / "reg")
    t = FakeTransport()
    conn = Connection(t, Options(host="node0"), registry=reg)  # type: ignore[arg-type]
    nodes = [{"node_rank": 0, "node_ip": "10.0.0.1", "session_id": "s1"}, {"node_rank": 1, "node_ip": "10.0.0.2"}]

    def job(*ranks: dict):
        return listing.parse(ps(session(list(ranks), nodes=nodes)), "node0").sessions[0]

    conn._register(job(rank(0)))
    try:
        conn.sync(job(rank(0), rank(1)))  # one node
        assert sorted(conn.links) == ["node0"] and len(conn.links["node0"].forwards) == 2  # type: ignore[attr-defined]
        conn.sync(job(rank(0), rank(1), rank(2, node_ip="10.0.0.2"), rank(3, node_ip="10.0.0.2")))  # node 1 joins
        assert sorted(conn.links) == ["10.0.0.2", "node0"]
        far = conn.links["10.0.0.2"].forwards  # type: ignore[attr-defined]
        assert sorted(f.remote_port for f in far) == [5680, 5681]
        port3 = conn.local_ports[3]
        conn.sync(job(rank(0), rank(1), rank(2, node_ip="10.0.0.2"), rank(3, node_ip="10.0.0.2", port=7000)))  # restart
        assert sorted(f.remote_port for f in far) == [5680, 7000] and conn.local_ports[3] == port3
        conn.sync(job(rank(0), rank(1, state="exited"), rank(2, node_ip="10.0.0.2"), rank(3, node_ip="10.0.0.2")))
        assert len(conn.links["node0"].forwards) == 1  # type: ignore[attr-defined]
        seen = Views.open(registry=reg).find_session("s1")
        states = {r["rank"]: r["state"] for r in seen["ranks"]}
        assert states == {0: "ready", 1: "exited", 2: "ready", 3: "ready"}
        assert {r["rank"]: r["port"] for r in seen["ranks"]} == conn.local_ports
        conn.links["10.0.0.2"].up = False  # type: ignore[attr-defined]
        conn.sync(job(rank(0), rank(2, node_ip="10.0.0.2"), rank(3, node_ip="10.0.0.2")))  # its link died: a new one
        assert len(t.opened) == 3 and len(conn.links["10.0.0.2"].forwards) == 2  # type: ignore[attr-defined]
    finally:
        conn.close()
    assert not (tmp_path / "reg" / "s1").exists() and not any(lk.up for lk in t.opened)


# -- a Ray Train run (connect --ray-address) ------------------------------------------------------------------


def ray_run(*ranks: dict, **kw) -> dict:
    """A Ray run's session as ``ps --ray-address`` lists it: ``<driver session>-ray1``, each worker by node IP."""
    rs = [dict(r, session_id="s1-ray1") for r in ranks]
    return session(rs, session_id="s1-ray1", mode="ray", parent_session="s1", **kw)


def test_a_ray_run_is_chosen_over_the_node_s_own_sessions_and_keeps_its_driver_session():
    driver = session([], started_at=5.0, mode="run")  # newer, but the driver's own session is not the run
    got = listing.parse(ps(driver, ray_run(rank(0, node_ip="10.0.0.1"), rank(1, node_ip="10.0.0.2"))), "head")
    s = listing.choose_ray(got, None, "head", "10.0.0.1:6379")
    assert s.session_id == "s1-ray1" and s.entry["parent_session"] == "s1"
    with pytest.raises(HarnessError, match=r"^no rtdebug-armed Ray Train run in the Ray cluster at 10\.0\.0\.1:6379"):
        listing.choose_ray(listing.parse(ps(driver), "head"), None, "head", "10.0.0.1:6379")
    with pytest.raises(HarnessError, match="no live Ray Train run 's1-ray2'"):
        listing.choose_ray(got, "s1-ray2", "head", "10.0.0.1:6379")


@pytest.mark.parametrize(
    ("r", "why"),
    [
        (rank(0), "without a node IP address"),  # a worker always names its node
        (rank(0, node_ip="gpu-node"), "without a node IP address"),
        (rank(0, node_ip="10.0.0.2", host="10.9.9.9"), "listening on 10.9.9.9, not on its node"),
    ],
)
def test_a_ray_worker_that_is_not_on_its_node_is_refused(r, why):
    with pytest.raises(HarnessError, match=why):
        listing.parse(ps(ray_run(r)), "head")
    ok = listing.parse(ps(ray_run(rank(0, node_ip="10.0.0.2", host="10.0.0.2"))), "head").sessions[0]
    assert ok.ranks[0].host == "10.0.0.2"


class AnsweringLink(FakeLink):
    """A home node that answers ``ps --json --ray-address``, ``hostname -I`` and the secret's ``cat``."""

    listing = b""

    def run(self, argv, timeout):
        if "ps" in argv:
            assert argv[-2:] == ["--ray-address", "10.0.0.1:6379"], argv
            return 0, AnsweringLink.listing, ""
        if argv == ["hostname", "-I"]:
            return 0, b"10.0.0.1 fe80::1 $(id)\n", ""
        assert argv[0] == "sh" and "/s1-ray1/job.secret" in argv[2] and "/s1/job.secret" in argv[2], argv
        return 0, b"k" * 40 + b"\n", ""


class AnsweringTransport(FakeTransport):
    def open_many(self, nodes, timeout=0):
        links = {n: (AnsweringLink if n == "head" else FakeLink)(n) for n in nodes}
        self.opened += links.values()
        return links


def test_a_ray_run_s_workers_go_through_their_own_nodes_and_refresh_reads_the_forwarded_gcs(tmp_path, monkeypatch):
    from rtdebug.connect.session import Connection, Options
    from rtdebug.registry.files import Registry
    from rtdebug.views import ray as rayview

    now: list = [None]  # what the forwarded GCS says next (a ray view's session entry)

    class FakeRayView:
        def __init__(self, address, trust):
            assert address.startswith("127.0.0.1:") and trust == (["k" * 40], frozenset())

        def session(self, sid):
            return now[0]

    monkeypatch.setattr(rayview, "RayView", FakeRayView)
    AnsweringLink.listing = ps(
        session([], mode="run"), ray_run(rank(0, node_ip="10.0.0.1"), rank(1, node_ip="10.0.0.2"))
    )
    reg = Registry(tmp_path / "reg")
    t = AnsweringTransport()
    conn = Connection(t, Options(host="head", ray_address="10.0.0.1:6379"), registry=reg)  # type: ignore[arg-type]
    try:
        conn.start()
        assert sorted(conn.links) == ["10.0.0.2", "head"]  # the head's worker through the home link
        home, far = conn.links["head"].forwards, conn.links["10.0.0.2"].forwards  # type: ignore[attr-defined]
        assert sorted((f.remote_host, f.remote_port) for f in home) == [("10.0.0.1", 6379), ("127.0.0.1", 5678)]
        assert [(f.remote_host, f.remote_port) for f in far] == [("127.0.0.1", 5679)]
        entry = reg.read_session("s1-ray1")
        assert entry["mode"] == "connected" and entry["ray_address"] == f"127.0.0.1:{conn.gcs_forward.local_port}"
        assert signing.read_secret(reg.session_dir("s1-ray1")) == "k" * 40  # served from memory, never written
        # a worker that appears on a third node gets a link and a forward; one that ended loses its forward
        now[0] = ray_run(rank(0, node_ip="10.0.0.1"), rank(1, node_ip="10.0.0.2", state="exited"),
                         rank(2, node_ip="10.0.0.3"))  # fmt: skip
        assert conn.refresh() is True
        assert far == set() and [f.remote_port for f in conn.links["10.0.0.3"].forwards] == [5680]  # type: ignore[attr-defined]
        assert "2 ranks on 2 nodes" in conn.summary()  # the live ones: ranks 0 and 2
        # the run has ended: the GCS lists it no more, nor does the head's ps
        now[0], AnsweringLink.listing = None, ps(session([], mode="run"))
        assert conn.refresh() is False
    finally:
        conn.close()
    assert not (tmp_path / "reg" / "s1-ray1").exists() and not any(lk.up for lk in t.opened)


# -- the ssh transport's ways to a node (issue 38, Speed): one jump master shared by every node ---------------


def test_every_node_goes_through_one_jump_master_as_a_mux_client(tmp_path):
    from rtdebug.connect.transport import SshTransport, proxy_command

    cmd = proxy_command("/usr/bin/ssh", ["-F", str(tmp_path / "my 50% cfg")], tmp_path / "c1", "login")
    # a mux client of the running master (no handshake of its own, no fallback prompt), the hop ssh expands
    assert cmd.startswith("/usr/bin/ssh -F ") and f" -S {tmp_path / 'c1'} " in cmd
    assert "-o ControlMaster=no -o BatchMode=yes -W '[%h]:%p' -- login" in cmd
    assert "'" + str(tmp_path / "my 50%% cfg") + "'" in cmd  # quoted for the shell, its % doubled for ssh
    t = SshTransport(["j1", "login"], ssh_config=str(tmp_path / "none.conf"))
    try:
        assert t.share_jump and t.route() == ["-J", "j1,login"]  # no jump master (yet): ssh's own -J
    finally:
        t.close()
    assert SshTransport([]).route() == []


def test_a_jump_host_with_the_user_s_own_control_master_is_left_to_it(tmp_path):
    from rtdebug.connect.transport import SshTransport, user_has_master

    assert not user_has_master("user root\ncontrolmaster false\n")
    assert not user_has_master("controlmaster auto\ncontrolpath none\n")
    assert user_has_master("controlmaster auto\ncontrolpath /home/u/.ssh/cm-%C\n")
    cfg = tmp_path / "ssh.conf"
    cfg.write_text(f"Host login\n  ControlMaster auto\n  ControlPath {tmp_path}/cm-%C\n  ControlPersist 60\n")
    t = SshTransport(["login"], ssh_config=str(cfg))  # a real `ssh -G`: the user's master serves the hop, as today
    try:
        assert not t.share_jump and t.route() == ["-J", "login"]
    finally:
        t.close()


def test_a_hop_the_jump_master_refused_is_told_by_ssh_itself():
    from rtdebug.connect.transport import refused_by_mux

    assert refused_by_mux("Stdio forwarding request failed: Session open refused by peer\nkex_exchange_identification")
    assert not refused_by_mux("root@10.0.0.4: Permission denied (publickey).")


def test_a_free_port_taken_before_it_is_checked_is_picked_again(tmp_path, monkeypatch):
    """Without --local-port-base any free port will do: one that another process took between the pick and the
    check is not "a stale tunnel" (that error is for a port the user named), so another is picked."""
    import socket as socket_mod

    from rtdebug.connect import session as session_mod
    from rtdebug.connect.session import Connection, Options
    from rtdebug.registry.files import Registry

    taken = socket_mod.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    picks = iter([busy, busy])
    real = session_mod.free_port
    monkeypatch.setattr(session_mod, "free_port", lambda: next(picks, None) or real())
    conn = Connection(None, Options(host="node0"), registry=Registry(tmp_path))  # type: ignore[arg-type]
    try:
        port = conn._port_for(3)
        assert port != busy and conn.local_ports == {3: port}
        assert conn._port_for(3) == port  # kept for the rank
        opts = Options(host="node0", local_port_base=busy - 3)
        named = Connection(None, opts, registry=Registry(tmp_path))  # type: ignore[arg-type]
        with pytest.raises(HarnessError, match=f"local port {busy} \\(rank 3\\) is in use by"):
            named._port_for(3)
    finally:
        taken.close()


def test_what_a_listing_copies_has_its_type_and_a_bounded_size():
    """A forged session or rank field (a text of megabytes, a number that is a string or a list, an
    infinite float) is left out of the local entry: a huge one would make every local reader skip it."""
    fields = {"script": (str,), "nproc_per_node": (int,), "started_at": (int, float), "lazy": (bool,)}
    forged = {"script": "x" * (listing.MAX_TEXT + 1), "nproc_per_node": "abc", "started_at": float("inf"), "lazy": 1}
    assert listing.plain(forged, fields) == {}
    good = {"script": "/a/t.py", "nproc_per_node": 2, "started_at": 1.5, "lazy": True, "other": "x"}
    assert listing.plain(good, fields) == {"script": "/a/t.py", "nproc_per_node": 2, "started_at": 1.5, "lazy": True}
    assert (
        listing.plain({"nproc_per_node": [1]}, fields) == {} and listing.plain({"nproc_per_node": True}, fields) == {}
    )


def test_an_error_that_quotes_another_machine_cannot_drive_the_terminal(capsys, monkeypatch):
    """The CLI prints every error with its control characters escaped: a remote's text quoted in one can
    neither retitle the terminal, clear it, nor forge a line of its own."""
    from rtdebug.commands import connect as connect_cmd

    def hostile(_opts):
        raise HarnessError("node0: bad address \x1b]0;PWNED\x07\r\nrtdebug: ok")

    monkeypatch.setattr(connect_cmd, "run", hostile)
    assert main(["connect", "node0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert err == "rtdebug: error: node0: bad address \\x1b]0;PWNED\\x07\\x0d\\x0artdebug: ok\n"


# -- a hostile node (the transport's side): endless output, a listing that names an alias, a node that is down ---


def test_a_remote_command_that_prints_without_end_is_cut_at_the_limit(monkeypatch):
    """The ssh client's output is read as it comes: past MAX_OUTPUT it is killed (not read to the end into
    memory), and the error names the remote command, not the launcher words before it."""
    from rtdebug.connect import sshsays
    from rtdebug.connect.sshsays import command_label, read_bounded

    monkeypatch.setattr(sshsays, "MAX_STDERR", 1000)
    endless = [sys.executable, "-c", "import sys\nsys.stderr.write('e' * 5000 + 'why')\nwhile True: print('A' * 4096)"]
    p = subprocess.Popen(endless, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err, why = read_bounded(p, 30, 1 << 20)
    finally:
        p.kill()
        p.wait()
    assert why == "big" and out == b"" and len(err) <= 1000 and err.endswith(b"why")  # stderr: its end only
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert read_bounded(p, 0.2, 100)[2] == "timeout"
    finally:
        p.kill()
        p.wait()
    p = subprocess.Popen([sys.executable, "-c", "print('ok')"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert read_bounded(p, 30, 100) == (b"ok\n", b"", "") and p.returncode == 0
    assert command_label(["/opt/venv/bin/python", "-m", "rtdebug", "ps", "--json"]) == "rtdebug ps --json"
    assert command_label(["/usr/local/bin/rtdebug", "ps", "--json"]) == "rtdebug ps --json"
    assert command_label([sys.executable, "-c", "import x; x.main()", "ps", "--json"]) == "rtdebug ps --json"


def test_a_node_address_that_the_user_s_ssh_config_turns_into_another_host_is_refused(tmp_path):
    """A listing's node address is opened only as the address it is (``ssh -G``, offline): an alias of the
    user's (another HostName) or a Host entry with its own proxy is refused in one line; an IP address, a
    plain name, a ``Host *`` of the user's and the host the user named pass."""
    from rtdebug.connect.transport import SshTransport

    cfg = tmp_path / "ssh.conf"
    cfg.write_text(
        "Host login\n  HostName 10.9.9.9\nHost evil*\n  ProxyCommand nc %h %p\nHost bast\n  ProxyJump other\n"
        "Host *\n  User root\n  ServerAliveInterval 7\n"
    )
    t = SshTransport(ssh_config=str(cfg))
    try:
        for ok in ("10.0.0.4", "fe80::1", "node7", "Node7"):
            t.check_listed(ok)
        for bad, says in (("login", "HostName '10.9.9.9'"), ("evil.com", "ProxyCommand"), ("bast", "ProxyJump")):
            with pytest.raises(HarnessError, match=f"not connecting to {bad}, a node address the job names: .*{says}"):
                t.check_listed(bad)
            with pytest.raises(HarnessError, match=f"not connecting to {bad}"):
                t.open_many([bad])  # refused before any ssh is started
        t.prestart(["login", "evil.com"])
        assert t.pending == {}  # nor started ahead
        t.named.add("login")  # the host the user typed (``open``) is theirs to name
        t.check_listed("login")
        with pytest.raises(HarnessError, match="invalid node address"):
            t.check_listed("-oProxyCommand=x")
    finally:
        t.close()
    (tmp_path / "all.conf").write_text("Host *\n  ProxyCommand nc %h %p\n")
    j = SshTransport(["login"], ssh_config=str(tmp_path / "all.conf"))  # the user's proxy for every host
    k = SshTransport(["j"], ssh_config=str(cfg))
    try:
        j.check_listed("10.0.0.4")
        with pytest.raises(HarnessError, match="HostName '10.9.9.9'"):
            k.check_listed("login")  # through --jump: still an alias
    finally:
        j.close()
        k.close()


@pytest.mark.parametrize(
    ("stderr", "says"),
    [
        # through a jump host: its sshd could not reach the node (down, or no sshd there)
        ("channel 0: open failed: connect failed: Connection refused\nstdio forwarding failed\n"
         "kex_exchange_identification: Connection closed by remote host\n", "down or no sshd listens there"),
        ("channel 0: open failed: connect failed: No route to host\nstdio forwarding failed\n", "No route to host"),
        ("kex_exchange_identification: Connection closed by remote host\r\n", "down or no sshd listens there"),
        ("ssh: connect to host 10.0.0.9 port 22: Connection refused\r\n", "down or no sshd listens there"),
        ("ssh: connect to host 10.0.0.9 port 22: Connection timed out\n", "down or no sshd listens there"),
    ],
)  # fmt: skip
def test_a_node_that_is_down_is_not_blamed_on_the_jump_host(stderr, says):
    line = explain(stderr, "node1", ["login"])
    assert says in line and "AllowTcpForwarding" not in line and "jump host" not in line
    assert line.startswith("cannot connect to node1 through login: ") and "\n" not in line and "\r" not in line
    refused = "channel 0: open failed: administratively prohibited: open failed\nstdio forwarding failed\n"
    assert "jump host login refused to forward" in explain(refused + stderr, "node1", ["login"])


def test_a_hop_that_failed_without_a_reason_is_told_by_whether_the_jump_host_forwards_at_all():
    """ssh -J says only "stdio forwarding failed" both when the jump host forwards nothing and when the node
    behind it is down: the jump master's answer (a forward to its own sshd) tells which; unknown: both named."""
    from rtdebug.connect.sshsays import hop_unknown

    said = "stdio forwarding failed\nkex_exchange_identification: Connection closed by remote host\n"
    assert hop_unknown(said) and not hop_unknown("channel 0: open failed: connect failed: x\n" + said)
    assert explain(said, "node1", ["login"], True).startswith("cannot connect to node1 through login: it is down")
    assert explain(said, "node1", ["login"], False).startswith("jump host login refused to forward")
    both = explain(said, "node1", ["login"])
    assert "AllowTcpForwarding" in both and "node1 is down or has no sshd listening" in both


def test_a_rank_s_last_collective_is_copied_whole_and_printable_or_not_at_all():
    coll = {"op": "BARRIER", "seq": 4, "state": "entered", "file": "/w/hang.py", "line": 26, "func": "evaluate",
            "shapes": "", "dtype": "", "pg": "0", "since": 1.5}  # fmt: skip
    (s,) = listing.parse(ps(session([rank(0, collective=coll)], pg_timeout_s=300, pg_timeout_source="x")), "n").sessions
    assert s.ranks[0].entry["collective"] == coll
    assert s.entry["pg_timeout_s"] == 300 and s.entry["pg_timeout_source"] == "x"
    for forged in ({"func": "a\x1b[2J"}, {"seq": True}, {"line": -1}, {"since": "now"}, {"shapes": 1}, {"op": None}):
        (s,) = listing.parse(ps(session([rank(0, collective={**coll, **forged})])), "n").sessions
        assert "collective" not in s.ranks[0].entry, forged
    (s,) = listing.parse(
        ps(session([rank(0, collective={k: v for k, v in coll.items() if k != "dtype"})])), "n"
    ).sessions
    assert "collective" not in s.ranks[0].entry


def test_ps_shows_a_connected_rank_s_own_pid_never_its_link_s():
    from rtdebug.registry.table import format_table, own_pid

    tunneled = rank(1, tunnel={"node": "node0", "remote_host": "127.0.0.1", "remote_port": 5679, "remote_pid": 4242})
    assert own_pid(tunneled) == 4242 and own_pid(rank(0)) == 100
    assert own_pid(rank(2, tunnel={"node": "n", "remote_host": "h", "remote_port": 1, "remote_pid": "1"})) == 102
    row = format_table([tunneled], "s1").splitlines()[1].split()
    assert row[:3] == ["1", "1", "4242"], row


def test_what_a_rank_s_debugger_does_is_copied_field_by_field():
    debug = {"state": "stopped", "reason": "breakpoint", "file": "/w/train.py", "line": 41, "by": None, "since": 2.0}
    (s,) = listing.parse(ps(session([rank(0, debug=debug)])), "n").sessions
    assert s.ranks[0].entry["debug"] == debug
    forged = {"state": "paused", "reason": "\x1b]0;x\x07", "file": 7, "line": True, "by": -1, "since": 1, "extra": 1}
    (s,) = listing.parse(ps(session([rank(0, debug=forged)])), "n").sessions
    assert s.ranks[0].entry["debug"] == {"state": "paused", "reason": None, "file": None, "line": None, "by": None,
                                         "since": 1}  # fmt: skip
    for bad in ({**debug, "state": "owned"}, {**debug, "since": "now"}, "stopped", None):
        (s,) = listing.parse(ps(session([rank(0, debug=bad)])), "n").sessions
        assert "debug" not in s.ranks[0].entry, bad
