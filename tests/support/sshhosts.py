"""Hosts that reach each other through real sshd's: the ``connect`` tests' laptop, jump host and two nodes.

Namespaces ``lap``, ``login``, ``n0``, ``n1`` on a private bridge (``support.netns``); ``lap`` has a route to
``login`` alone. Every host but ``lap`` runs a real ``sshd -D`` with a config, host key and authorized key
made here (ended by pid with its namespace); ``login`` runs a second one with ``AllowTcpForwarding no``.
The laptop's ssh reads only the client config made here (``--ssh-config``), key and known_hosts, never
~/.ssh. The nodes share one config directory (a cluster's shared home, where the per-user job secret
lives), the laptop has its own, so ``stacks`` from the laptop works only with the secret ``connect`` read
over ssh. ``cluster_up`` is a fixture body; the rest drives ``rtdebug connect`` from the laptop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil

from support.netns import Hosts, sweep
from support.paths import PY, ROOT
from support.sigs import default_dispositions
from support.wait import until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
REMOTE = f"{PY} -m rtdebug"  # how the nodes' sshd runs rtdebug (this interpreter: no PATH needed)
NOFWD_PORT = 2200
BIND_ALL = "import socket,sys\nfor p in sys.argv[1:]:\n s=socket.socket();s.bind(('127.0.0.1',int(p)));s.close()"


class Cluster(Hosts):
    """``lap`` (reaches only ``login``), ``login`` (a jump host), ``n0`` and ``n1`` (the job's nodes).

    ``node_env``: more environment for what runs on the nodes, their sshd's sessions included."""

    def __init__(self, tmp: Path, node_env: dict[str, str] | None = None) -> None:
        super().__init__(tmp)
        tag = self.bridge[: -len("-br")]
        self.names = {h: f"{tag}-{h}" for h in ("n0", "n1", "lap", "login")}
        self.addr = {h: f"{self.subnet}.{i + 1}" for i, h in enumerate(self.names)}
        self.cluster_home = tmp / "home-cluster"
        self.lap_home = tmp / "home-lap"
        self.sshd: list[subprocess.Popen] = []
        self.node_env = dict(node_env or {})
        self.cfg = Path()  # the laptop's ssh client config (setup_ssh)

    def up(self, default_route: bool = False) -> None:
        """``default_route``: the nodes route everything through their eth0, so a program that finds its
        own address by a route to the internet (Ray's node IP) finds that one; the laptop still does not."""
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
        for h in ("n0", "n1") if default_route else ():
            subprocess.run(["ip", "-n", self.names[h], "route", "add", "default", "dev", "eth0"],
                           check=True, capture_output=True, timeout=30)  # fmt: skip

    def env(self, h: str) -> dict[str, str]:
        env = super().env(h)
        env["XDG_CONFIG_HOME"] = str(self.lap_home if h == "lap" else self.cluster_home)
        env.pop("RTDEBUG_JOB_SECRET", None)
        return env if h == "lap" else dict(env, **self.node_env)


def _keygen(path: Path, kind: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True, timeout=60)
    return (path.with_suffix(".pub") if path.suffix else Path(str(path) + ".pub")).read_text().strip()


# A session's shell may run the machine's `pyenv init` (its .bashrc), which takes pyenv's shim lock; a session
# ended mid-rehash (the test's teardown kills what runs in its namespaces) leaves the lock behind, and every
# later rehash waits 60 s for it, so every later ssh into a test host did: the hosts' shells wait 1 s at most.
REHASH = " PYENV_REHASH_TIMEOUT=1"


def sshd_config(c: Cluster, h: str, port: int, forwarding: bool) -> Path:
    d = c.tmp / "ssh"
    reg = c.tmp / f"registry-{h}"
    pythonpath = f" PYTHONPATH={os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else ""
    more = "".join(f" {k}={v}" for k, v in c.node_env.items())
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
SetEnv RTDEBUG_REGISTRY_DIR={reg} XDG_CONFIG_HOME={c.cluster_home} PYTHONUNBUFFERED=1{REHASH}{pythonpath}{more}
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
                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=default_dispositions)  # fmt: skip
    c.sshd.append(p)
    c.procs.append(p)


def ssh(c: Cluster, cfg: Path, host: str, *cmd: str) -> subprocess.CompletedProcess:
    jump = [] if host == "login" else ["-J", "login"]
    return c.run("lap", "ssh", "-F", str(cfg), "-o", "BatchMode=yes", *jump, host, *cmd, timeout=60)


def cluster_up(tmp_path: Path, node_env: dict[str, str] | None = None, default_route: bool = False):
    """A pytest fixture body: the four hosts and their sshd's, skipped with the reason where they cannot be
    made, always taken down (everything that runs inside them with them)."""
    import pytest

    if shutil.which("ip") is None or not os.path.exists(SSHD) or shutil.which("ssh") is None:
        pytest.skip("needs iproute2, openssh-server and openssh-client (scripts/setup.sh installs them)")
    sweep()
    c = Cluster(tmp_path, node_env)
    try:
        try:
            c.up(default_route)
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot create network namespaces here (needs CAP_NET_ADMIN): {exc.stderr.strip()}")
        c.cluster_home.mkdir()
        c.lap_home.mkdir()
        c.cfg = setup_ssh(c)
        yield c
    finally:
        c.down()


def connect_args(c: Cluster, host: str, *extra: str) -> list[str]:
    return ["connect", host, "--ssh-config", str(c.cfg), "--remote-rtdebug", REMOTE, "--refresh", "1", *extra]


def one_line_error(c: Cluster, host: str, *extra: str, code: int = 1) -> str:
    """``connect`` that must fail: exit ``code``, one line on stderr, nothing left running or registered."""
    before = set(c.pids("lap"))
    r = c.rtdebug("lap", *connect_args(c, host, *extra), timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and lines[0].startswith("rtdebug: error: "), r
    left = [p for p in c.pids("lap") if p not in before]
    assert not left, [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]
    reg = c.tmp / "registry-lap"
    assert not reg.exists() or not [p for p in reg.iterdir() if p.is_dir()], list(reg.iterdir())
    return lines[0]


def ps_json(c: Cluster, h: str, *extra: str) -> dict:
    r = c.rtdebug(h, "ps", "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def start_connect(c: Cluster, *extra: str) -> subprocess.Popen:
    """``rtdebug connect node0 --jump login EXTRA`` on the laptop, once it says it is connected."""
    log = open(c.tmp / "connect.log", "wb")
    argv = ["ip", "netns", "exec", c.names["lap"], PY, "-m", "rtdebug"]
    argv += connect_args(c, "node0", "--jump", "login", *extra)
    p = subprocess.Popen(argv, cwd=ROOT, env=c.env("lap"), stdout=log, stderr=subprocess.STDOUT,
                         preexec_fn=default_dispositions)  # fmt: skip
    c.procs.append(p)
    until(lambda: "rtdebug: connected" in (c.tmp / "connect.log").read_text(errors="replace") or p.poll() is not None,
          120, "connect's connected line")  # fmt: skip
    assert p.poll() is None, (c.tmp / "connect.log").read_text()
    return p


def ssh_processes(connect_pid: int) -> list[psutil.Process]:
    """Every ssh that the ``connect`` of pid ``connect_pid`` started (its control directory, named by that pid,
    is on their command lines): only its, as other connects may run on this machine meanwhile."""
    mark = f"rtdebug-connect-{connect_pid}-"
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "ssh" and mark in " ".join(p.info["cmdline"] or []):
            out.append(p)
    return out
