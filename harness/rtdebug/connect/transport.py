"""The seam between ``rtdebug connect`` and the way it reaches a job's nodes: one ``Link`` per node.

A ``Transport`` opens a ``Link`` to a node (by the name the user's tools know it by); a link runs one command
there (``run``: ``rtdebug ps --json``, reading the job secret) and forwards a local port bound to 127.0.0.1 to
an address the node can reach (``forward`` / ``cancel``), until ``close``. The link is a child process of
this one that dies with it (``PR_SET_PDEATHSIG``), so a SIGKILLed ``connect`` leaves no link behind.

``SshTransport``: the system's own ``ssh`` (``~/.ssh/config`` applies: ``ProxyJump``, ``IdentityFile``...), one
control master per node (``-M -S``, in a private directory), ``BatchMode`` (a password prompt would hang),
``ExitOnForwardFailure`` and ``ServerAliveInterval``; forwards are added to and removed from the running
master (``-O forward`` / ``-O cancel``), so ranks that appear or end later never need a new connection.
Jump hosts (``--jump``): one control master to the last one (``-J`` for those before it), opened once, and
every node reached through it (``ProxyCommand ssh -S JUMP -W``), so each node costs one ssh handshake, not
one per hop; when the user's config gives that jump host a ``ControlMaster`` of its own, plain ``-J`` (their
master serves the hop, as ssh's own ``ProxyJump`` would use it). ``prestart`` spawns the masters to several
nodes at once, so they connect side by side; ``open_many`` then waits for each.
A node a job's listing names (any but the ``HOST`` given to ``open``) is first checked with ``ssh -G``
(``check_listed``): an alias of the user's ssh config is refused, so a job cannot pick where their keys go.
A remote command's output is read as it comes and cut at ``MAX_OUTPUT`` (``sshsays.read_bounded``).
A ``kubectl port-forward`` transport would be one ``Link`` per pod: ``run`` is
``kubectl exec``, ``forward`` one ``kubectl port-forward pod LOCAL:PORT`` child per port (docs/connect.md).
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import process_create_time
from rtdebug.connect.sshsays import (
    command_label,
    explain,
    first_bytes,
    hop_unknown,
    last_line,
    listed_node_problem,
    proxy_command,
    read_bounded,
    refused_by_mux,
    ssh_settings,
    user_has_master,
)

PR_SET_PDEATHSIG = 1
CONNECT_TIMEOUT_S = 15.0
MAX_OUTPUT = 8 << 20  # bytes: what a remote command may print (a ps --json of thousands of ranks)
# a node name as ssh takes it: an alias, a host name, user@host, an IPv4/IPv6 address (never an option)
NODE_NAME = re.compile(r"[A-Za-z0-9_.%\[\]:@-]{1,255}")


DIR_PREFIX = "rtdebug-connect-"


def sweep_stale(tmp: str | None = None) -> None:
    """Remove the control directories of earlier connects that died without cleaning up (SIGKILL): each is
    named by its connect's pid; only the user's own real directories, only when that pid is gone."""
    for d in Path(tmp or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = d.name[len(DIR_PREFIX) :].split("-", 1)[0]
        try:
            st = d.lstat()
            if not pid.isdigit() or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


def check_node_name(name: str, what: str = "host") -> str:
    if not NODE_NAME.fullmatch(name) or name.startswith("-"):
        raise HarnessError(f"invalid {what} {name[:80]!r}: expected a host name, alias or address", 2)
    return name


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the process that started us dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl: nobody would ever end us
        os._exit(1)


def spawn(argv: list[str], **kw: object) -> subprocess.Popen:
    """A child that dies with this process (from the thread that calls this: call it from the main one)."""
    me = os.getpid()
    return subprocess.Popen(argv, preexec_fn=lambda: _die_with_parent(me), **kw)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Forward:
    local_port: int
    remote_host: str
    remote_port: int

    def spec(self) -> str:
        host = f"[{self.remote_host}]" if ":" in self.remote_host else self.remote_host
        return f"127.0.0.1:{self.local_port}:{host}:{self.remote_port}"


class Link(Protocol):
    node: str
    pid: int
    create_time: float

    def run(self, argv: list[str], timeout: float) -> tuple[int, bytes, str]:
        """(exit code, stdout, one line of stderr) of ``argv`` run on the node."""
        ...

    def forward(self, forwards: list[Forward]) -> None: ...

    def cancel(self, forwards: list[Forward]) -> None: ...

    def alive(self) -> bool: ...

    def close(self) -> None: ...


class Transport(Protocol):
    label: str

    def open(self, node: str, timeout: float = CONNECT_TIMEOUT_S) -> Link:
        """A link to ``node``, connected (a one-line ``HarnessError`` when it cannot be)."""
        ...

    def open_many(self, nodes: list[str], timeout: float = CONNECT_TIMEOUT_S) -> dict[str, Link]:
        """Links to several nodes, connected side by side."""
        ...

    def close(self) -> None:
        """Everything this transport still holds (a shared jump master) ended."""
        ...


@dataclass
class SshLink:
    """One control master to one node, a child of this process."""

    transport: SshTransport
    node: str
    control: Path
    proc: subprocess.Popen
    log: Path
    pid: int = 0
    create_time: float = 0.0
    forwards: set[Forward] = field(default_factory=set)
    via_jump: bool = False  # through the shared jump master (whose mux relays no reason for a refused hop)

    def _client(self, *extra: str) -> list[str]:
        return [self.transport.ssh, *self.transport.base_options(), "-S", str(self.control), *extra, self.node]

    def wait_ready(self, deadline: float, jumps: list[str] | None = None) -> None:
        """Until the master is up (its control socket exists); ``jumps``: the hops before it, for its errors."""
        hops = self.transport.jumps if jumps is None else jumps
        while not self.control.exists():
            if self.proc.poll() is not None:
                raise HarnessError(explain(_log(self), self.node, hops))
            if time.monotonic() > deadline:
                self.close()
                via = f" through {','.join(hops)}" if hops else ""
                why = f"no answer within {CONNECT_TIMEOUT_S:g} s (is it down, or unreachable from here?)"
                raise HarnessError(f"cannot connect to {self.node}{via}: {why}")
            time.sleep(0.01)
        self.pid = self.proc.pid
        self.create_time = process_create_time(self.pid) or time.time()

    def run(self, argv: list[str], timeout: float) -> tuple[int, bytes, str]:
        """Its output read as it comes, at most ``MAX_OUTPUT`` bytes: past that (or ``timeout``) the ssh client
        is killed, so a node that prints without end costs this process no more than that."""
        cmd = " ".join(shlex.quote(a) for a in argv)
        proc = subprocess.Popen(
            [*self._client("-o", "ControlMaster=no", "-T"), "--", cmd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err, why = read_bounded(proc, timeout, MAX_OUTPUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        if why == "timeout":
            raise HarnessError(f"{self.node}: `{command_label(argv)}` did not finish within {timeout:g} s")
        if why == "big":
            raise HarnessError(f"{self.node}: `{command_label(argv)}` printed more than {MAX_OUTPUT} bytes; not read")
        return proc.returncode, out, last_line(err.decode(errors="replace"))

    def _mux(self, op: str, forwards: list[Forward]) -> None:
        if not forwards:
            return
        args = [a for f in forwards for a in ("-L", f.spec())]
        p = subprocess.run(
            self._client("-O", op, *args), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
        )
        if p.returncode != 0 and op == "forward":
            why = last_line(p.stderr) or f"ssh -O forward exited {p.returncode}"
            raise HarnessError(f"{self.node}: could not forward {forwards[0].spec()}: {why}")

    def forward(self, forwards: list[Forward]) -> None:
        self._mux("forward", forwards)
        self.forwards.update(forwards)

    def cancel(self, forwards: list[Forward]) -> None:
        self._mux("cancel", [f for f in forwards if f in self.forwards])
        self.forwards.difference_update(forwards)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.forwards.clear()
        for p in (self.control, self.log):
            try:
                p.unlink()
            except OSError:
                pass


class SshTransport:
    """The system's ``ssh``, through ``jumps`` (one master to the last, shared), with ``ssh_config`` (``-F``)."""

    label = "ssh"

    def __init__(
        self,
        jumps: list[str] | None = None,
        ssh_config: str | None = None,
        options: list[str] | None = None,
        ssh: str | None = None,
    ) -> None:
        self.jumps = [check_node_name(j, "jump host") for j in (jumps or [])]
        self.ssh_config = ssh_config
        self.options = list(options or [])
        found = ssh or shutil.which("ssh")
        if not found:
            raise HarnessError("rtdebug connect needs the ssh client: install openssh-client")
        self.ssh = found
        sweep_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))  # 0700: the control sockets
        self._n = 0
        self.jump: SshLink | None = None  # the master to the last jump host, every node's way there
        self.pending: dict[str, SshLink] = {}  # started by prestart, not yet claimed by open_many
        self.share_jump = bool(self.jumps) and not self._user_master(self.jumps[-1])
        self.named: set[str] = set()  # the hosts the user named (``open``); any other node came from a listing
        self.vetted: dict[str, str] = {}  # a listed node -> why it is refused ("": it is not)
        self.plain: dict[str, str] | None = None  # ``ssh -G`` of a name no Host entry of its own matches

    def base_options(self) -> list[str]:
        out = ["-F", self.ssh_config] if self.ssh_config else []
        for o in self.options:
            out += ["-o", o]
        return out

    def _config(self) -> list[str]:
        return ["-F", self.ssh_config] if self.ssh_config else []

    def settings(self, host: str, words: list[str]) -> tuple[str, str]:
        """``ssh -G`` of ``host`` with ``words`` before it (no connection is made): what ssh would use for it,
        as its text, or ``("", why)`` when ssh cannot say."""
        try:
            p = subprocess.run(
                [self.ssh, *words, "-G", "--", host], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=10,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return "", str(exc)
        if p.returncode != 0:
            return "", last_line(p.stderr) or f"ssh -G exited {p.returncode}"
        return p.stdout, ""

    def _user_master(self, host: str) -> bool:
        """Whether the user's ssh config gives ``host`` a ControlMaster of its own."""
        return user_has_master(self.settings(host, self._config())[0])

    def ssh_g(self, host: str) -> tuple[dict[str, str], str]:
        """What ssh would use for ``host`` on a node master's command line: its settings, or ``({}, why)``."""
        route = ["-J", ",".join(self.jumps)] if self.jumps else []  # as the real route: the config's proxy unused
        text, why = self.settings(host, [*self.base_options(), *route])
        return (ssh_settings(text), "") if not why else ({}, why)

    def check_listed(self, node: str) -> None:
        """A node address a job's listing named (not a host the user typed) is opened only when the user's
        ssh config takes it for what it is: no ``Host`` entry that turns it into another HostName, or sends
        it through a ProxyCommand / ProxyJump of its own, so the job cannot pick one of the user's aliases."""
        if node in self.named:
            return
        if node not in self.vetted:
            conf, err = self.ssh_g(check_node_name(node, "node address"))
            if self.plain is None:  # what any host gets (a ``Host *`` of the user's, the jump hosts connect sets)
                self.plain = self.ssh_g(f"rtdebug-plain-{os.getpid()}.invalid")[0]
            self.vetted[node] = f"ssh -G failed: {err}" if err else listed_node_problem(node, conf, self.plain)
        why = self.vetted[node]
        if why:
            raise HarnessError(f"not connecting to {node}, a node address the job names: {why}")

    def _master_argv(self, control: Path, node: str, route: list[str], options: list[str], jump: bool) -> list[str]:
        # a jump master has no forwards of its own: one node's refused channel must not end every node's way
        fwd = ["-o", f"ExitOnForwardFailure={'no' if jump else 'yes'}"]
        return [
            self.ssh,
            *options,
            *("-M", "-S", str(control), "-N"),
            *("-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", "BatchMode=yes", *fwd),
            *("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"),
            *("-o", f"ConnectTimeout={CONNECT_TIMEOUT_S:g}"),
            *route,
            node,
        ]

    def _spawn_master(self, node: str, route: list[str], options: list[str], jump: bool = False) -> SshLink:
        check_node_name(node)
        self._n += 1
        control, log = self.dir / f"c{self._n}", self.dir / f"c{self._n}.log"
        argv = self._master_argv(control, node, route, options, jump)
        with open(log, "wb") as err:  # the master's and its jump hosts' own ssh's messages
            proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        return SshLink(self, node, control, proc, log, via_jump=any(a.startswith("ProxyCommand=") for a in route))

    def _wait(self, link: SshLink, deadline: float) -> SshLink:
        """``link`` up; one refused on the way through the shared jump master is tried once with ``-J``, so
        ssh itself says why (the mux says only "Stdio forwarding request failed"); where ssh says only that
        the hop failed, the jump master is asked whether it forwards at all (``hop_forwards``)."""
        try:
            link.wait_ready(deadline)
            return link
        except HarnessError as exc:
            err, said = exc, _log(link)
        if link.via_jump and refused_by_mux(said):
            link.close()
            retry = self._spawn_master(link.node, ["-J", ",".join(self.jumps)], self.base_options())
            try:
                retry.wait_ready(deadline)
                return retry
            except HarnessError as again:
                err, said = again, _log(retry)
        if hop_unknown(said) and self.jump is not None and self.jump.alive():
            raise HarnessError(explain(said, link.node, self.jumps, self.hop_forwards())) from None
        raise err

    def hop_forwards(self) -> bool | None:
        """Whether the last jump host forwards a connection at all: one through its master to its own sshd
        (the address and port this side reached it at) answers with an ssh banner; None: no master to ask."""
        if self.jump is None or not self.jump.alive():
            return None
        hop = self.jumps[-1]
        text, why = self.settings(hop, self._config())
        if why:
            return None
        conf = ssh_settings(text)
        target = f"[{conf.get('hostname', hop)}]:{conf.get('port', '22')}"
        words = [self.ssh, *self._config(), "-S", str(self.jump.control), "-o", "ControlMaster=no"]
        proc = subprocess.Popen(
            [*words, "-o", "BatchMode=yes", "-W", target, "--", hop],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            banner = first_bytes(proc, 5.0, 4)
        finally:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        return banner == b"SSH-"

    def route(self) -> list[str]:
        """How a node master gets there: through the shared jump master, else ``-J`` (or the user's config)."""
        if not self.jumps:
            return []
        if self.jump is None or not self.jump.alive():
            return ["-J", ",".join(self.jumps)]
        return ["-o", f"ProxyCommand={proxy_command(self.ssh, self._config(), self.jump.control, self.jumps[-1])}"]

    def _jump_master(self, deadline: float) -> None:
        """The shared master to the last jump host (``-J`` for those before it), up; a dead one replaced."""
        if not self.share_jump or (self.jump is not None and self.jump.alive()):
            return
        if self.jump is not None:
            self.jump.close()
            self.jump = None
        earlier = self.jumps[:-1]
        route = ["-J", ",".join(earlier)] if earlier else []
        link = self._spawn_master(self.jumps[-1], route, self._config(), jump=True)
        link.wait_ready(deadline, earlier)  # its errors name the jump host itself
        self.jump = link

    def _start(self, node: str) -> SshLink:
        link = self.pending.pop(node, None)
        if link is not None and link.alive():
            return link
        if link is not None:
            link.close()
        return self._spawn_master(node, self.route(), self.base_options())

    def prestart(self, nodes: list[str] | set[str]) -> None:
        """Spawn the masters to ``nodes`` now (from the main thread); ``open_many`` waits for them later."""
        if self.share_jump and (self.jump is None or not self.jump.alive()):
            return  # the jump master is opened (and waited for) by open_many
        for node in sorted(set(nodes) - set(self.pending)):
            try:
                self.check_listed(node)  # (open_many says why, for the node, when it is asked for it)
            except HarnessError:
                continue
            self.pending[node] = self._spawn_master(node, self.route(), self.base_options())

    def open(self, node: str, timeout: float = CONNECT_TIMEOUT_S) -> Link:
        """A link to the host the user named (``HOST``): taken as it is, with whatever their config makes it."""
        self.named.add(check_node_name(node))
        return self.open_many([node], timeout)[node]

    def open_many(self, nodes: list[str], timeout: float = CONNECT_TIMEOUT_S) -> dict[str, Link]:
        """Links to ``nodes``; any the user did not name (``open``) is a listing's, checked (``check_listed``)."""
        for n in nodes:
            self.check_listed(n)
        deadline = time.monotonic() + timeout
        self._jump_master(deadline)
        links = {n: self._start(n) for n in nodes}
        try:
            for n, link in list(links.items()):
                links[n] = self._wait(link, deadline)
        except BaseException:
            for link in links.values():
                link.close()
            raise
        return dict(links)

    def close(self) -> None:
        for link in [*self.pending.values(), *([self.jump] if self.jump else [])]:
            link.close()
        self.pending.clear()
        self.jump = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _log(link: SshLink) -> str:
    return link.log.read_text(errors="replace") if link.log.exists() else ""
