"""``rtdebug connect`` end to end: a laptop that reaches a 2-node job only through a login node's sshd.

Namespaces ``lap``, ``login``, ``n0``, ``n1`` on a private bridge (``support.netns``); ``lap`` has a route to
``login`` alone. Every host but ``lap`` runs a real ``sshd -D`` with a config, host key and authorized key
this test makes (ended by pid with its namespace); ``login`` runs a second one with ``AllowTcpForwarding no``.
The laptop's ssh reads only the test's client config (``--ssh-config``), key and known_hosts, never ~/.ssh.
The nodes share one config directory (a cluster's shared home, where the per-user job secret lives), the
laptop has its own, so ``stacks`` from the laptop works only with the secret ``connect`` read over ssh.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from support.netns import Hosts, sweep
from support.paths import PY, ROOT, SCRIPTS, marker_line
from support.wait import until

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SCRIPT = SCRIPTS / "connect_steps.py"  # the ranks agree on the stop, so the job ends well
PROBE = SCRIPTS / "dap_probe.py"
RDZV_PORT = 29500
REMOTE = f"{PY} -m rtdebug"  # how the nodes' sshd runs rtdebug (this interpreter: no PATH needed)
NOFWD_PORT = 2200
BIND_ALL = "import socket,sys\nfor p in sys.argv[1:]:\n s=socket.socket();s.bind(('127.0.0.1',int(p)));s.close()"


class Cluster(Hosts):
    """``lap`` (reaches only ``login``), ``login`` (a jump host), ``n0`` and ``n1`` (the job's nodes)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        tag = self.bridge[: -len("-br")]
        self.names = {h: f"{tag}-{h}" for h in ("n0", "n1", "lap", "login")}
        self.addr = {h: f"{self.subnet}.{i + 1}" for i, h in enumerate(self.names)}
        self.cluster_home = tmp / "home-cluster"
        self.lap_home = tmp / "home-lap"
        self.sshd: list[subprocess.Popen] = []

    def up(self) -> None:
        super().up()
        lap, login = self.names["lap"], self.addr["login"]
        for cmd in (
            ["addr", "flush", "dev", "eth0"],
            ["addr", "add", f"{self.addr['lap']}/32", "dev", "eth0"],
            ["route", "add", f"{login}/32", "dev", "eth0"],
        ):
            subprocess.run(["ip", "-n", lap, *cmd], check=True, capture_output=True, timeout=30)
        subprocess.run(["ip", "-n", self.names["login"], "route", "add", f"{self.addr['lap']}/32", "dev", "eth0"],
                       check=False, capture_output=True, timeout=30)  # fmt: skip

    def env(self, h: str) -> dict[str, str]:
        env = super().env(h)
        env["XDG_CONFIG_HOME"] = str(self.lap_home if h == "lap" else self.cluster_home)
        env.pop("RTDEBUG_JOB_SECRET", None)
        return env


def _keygen(path: Path, kind: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True, timeout=60)
    return (path.with_suffix(".pub") if path.suffix else Path(str(path) + ".pub")).read_text().strip()


def sshd_config(c: Cluster, h: str, port: int, forwarding: bool) -> Path:
    d = c.tmp / "ssh"
    reg = c.tmp / f"registry-{h}"
    pythonpath = f" PYTHONPATH={os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else ""
    text = f"""
Port {port}
ListenAddress {c.addr[h]}
HostKey {d / "host_key"}
PidFile none
AuthorizedKeysFile {d / "authorized_keys"}
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding {"yes" if forwarding else "no"}
DisableForwarding no
SetEnv RTDEBUG_REGISTRY_DIR={reg} XDG_CONFIG_HOME={c.cluster_home} PYTHONUNBUFFERED=1{pythonpath}
LogLevel ERROR
"""
    path = d / f"sshd-{h}-{port}.conf"
    path.write_text(text)
    return path


def setup_ssh(c: Cluster) -> Path:
    """Keys, sshd on login (twice), n0 and n1, and the laptop's client config; returns that config."""
    d = c.tmp / "ssh"
    d.mkdir(mode=0o700)
    host_pub = _keygen(d / "host_key")
    user_pub = _keygen(d / "id")
    _keygen(d / "stranger")  # a key no host authorizes
    (d / "authorized_keys").write_text(user_pub + "\n")
    (d / "authorized_keys").chmod(0o600)
    names = {"login": "login", "n0": "node0", "n1": "node1"}
    known = [f"{c.addr[h]},{alias} {host_pub}" for h, alias in names.items()]
    known.append(f"[{c.addr['login']}]:{NOFWD_PORT},[nofwd]:{NOFWD_PORT} {host_pub}")
    (d / "known_hosts").write_text("\n".join(known) + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    for h in names:
        start_sshd(c, h, 22, True)
    start_sshd(c, "login", NOFWD_PORT, False)
    cfg = d / "client.conf"
    hosts = "".join(f"Host {alias}\n  HostName {c.addr[h]}\n" for h, alias in names.items())
    hosts += f"Host nofwd\n  HostName {c.addr['login']}\n  Port {NOFWD_PORT}\n"
    cfg.write_text(
        hosts + f"Host *\n  User root\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
    )
    stranger = cfg.read_text().replace(f"IdentityFile {d / 'id'}", f"IdentityFile {d / 'stranger'}")
    (d / "stranger.conf").write_text(stranger)
    for h in names:  # each sshd answers before the test goes on
        until(lambda h=h: ssh(c, cfg, names[h], "true").returncode == 0, 60, f"sshd on {h}", every=0.2)
    return cfg


def start_sshd(c: Cluster, h: str, port: int, forwarding: bool) -> None:
    conf = sshd_config(c, h, port, forwarding)
    log = open(c.tmp / f"sshd-{h}-{port}.log", "wb")
    p = subprocess.Popen(["ip", "netns", "exec", c.names[h], SSHD, "-D", "-e", "-f", str(conf)],
                         stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    c.sshd.append(p)
    c.procs.append(p)


def ssh(c: Cluster, cfg: Path, host: str, *cmd: str) -> subprocess.CompletedProcess:
    jump = [] if host == "login" else ["-J", "login"]
    return c.run("lap", "ssh", "-F", str(cfg), "-o", "BatchMode=yes", *jump, host, *cmd, timeout=60)


@pytest.fixture
def cluster(tmp_path):
    if shutil.which("ip") is None or not os.path.exists(SSHD) or shutil.which("ssh") is None:
        pytest.skip("needs iproute2, openssh-server and openssh-client (scripts/setup.sh installs them)")
    sweep()
    c = Cluster(tmp_path)
    try:
        try:
            c.up()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot create network namespaces here (needs CAP_NET_ADMIN): {exc.stderr.strip()}")
        c.cluster_home.mkdir()
        c.lap_home.mkdir()
        c.cfg = setup_ssh(c)  # type: ignore[attr-defined]
        yield c
    finally:
        c.down()


def connect_args(c: Cluster, host: str, *extra: str) -> list[str]:
    return ["connect", host, "--ssh-config", str(c.cfg), "--remote-rtdebug", REMOTE, "--refresh", "1", *extra]  # type: ignore[attr-defined]


def one_line_error(c: Cluster, host: str, *extra: str) -> str:
    """``connect`` that must fail: exit 1, one line on stderr, nothing left running or registered."""
    before = set(c.pids("lap"))
    r = c.rtdebug("lap", *connect_args(c, host, *extra), timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("rtdebug: error: "), r
    left = [p for p in c.pids("lap") if p not in before]
    assert not left, [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]
    reg = c.tmp / "registry-lap"
    assert not reg.exists() or not [p for p in reg.iterdir() if p.is_dir()], list(reg.iterdir())
    return lines[0]


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


def ps_json(c: Cluster, h: str, *extra: str) -> dict:
    r = c.rtdebug(h, "ps", "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


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


def start_connect(c: Cluster, *extra: str) -> subprocess.Popen:
    log = open(c.tmp / "connect.log", "wb")
    argv = ["ip", "netns", "exec", c.names["lap"], PY, "-m", "rtdebug"]
    argv += connect_args(c, "node0", "--jump", "login", *extra)
    p = subprocess.Popen(argv, cwd=ROOT, env=c.env("lap"), stdout=log, stderr=subprocess.STDOUT)
    c.procs.append(p)
    until(lambda: "rtdebug: connected" in (c.tmp / "connect.log").read_text(errors="replace") or p.poll() is not None,
          120, "connect's connected line")  # fmt: skip
    assert p.poll() is None, (c.tmp / "connect.log").read_text()
    return p


def ssh_processes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "ssh" and "rtdebug-connect-" in " ".join(p.info["cmdline"] or []):
            out.append(p)
    return out


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
        probes[n] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=c.env("lap"))
    out = {}
    for n, p in probes.items():
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stdout + stderr
        probe = json.loads(stdout.strip().splitlines()[-1])
        assert probe["line"] == line, probe
        out[n] = probe["value"].strip("'\"")
    return out


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
    assert ssh_processes()
    killed_dirs = set(Path("/tmp").glob(f"rtdebug-connect-{conn.pid}-*"))  # its ssh control directory
    assert killed_dirs
    conn.send_signal(signal.SIGKILL)
    conn.wait(timeout=30)
    until(ssh_processes, 30, "no ssh process of connect left", ok=lambda ps: not ps)
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
    assert stop.returncode == 0, stop.stderr
    assert conn.wait(timeout=60) == 0
    assert not ssh_processes() and ps_json(c, "lap", "--all")["sessions"] == []
    assert ready_ranks(c, "n0") == [0, 1, 2, 3]

    # and Ctrl-C: it says so, removes its session, closes every tunnel
    conn = start_connect(c)
    conn.send_signal(signal.SIGINT)
    assert conn.wait(timeout=60) == 0
    assert not ssh_processes() and ps_json(c, "lap", "--all")["sessions"] == []

    # connected when the job ends: connect sees it, closes everything and exits 0; the job ended well
    conn = start_connect(c)
    (tmp_path / "stop").write_text("")
    assert conn.wait(timeout=120) == 0
    assert "has ended on node0" in (c.tmp / "connect.log").read_text()
    assert not ssh_processes() and not [p for p in (c.tmp / "registry-lap").iterdir() if p.is_dir()]
    for p in nodes:
        assert p.wait(timeout=120) == 0, c.trouble()
