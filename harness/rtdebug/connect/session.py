"""One connected job: its links (one per node), a forward per live rank and one for its store, and the
local session that makes ``ps``, ``attach``, ``stacks`` and the VS Code extension work here as on a node.

The local session (mode ``connected``) is this process's: ``launcher_pid`` is ``connect`` itself and each
rank entry's ``pid`` is the link (ssh master) that carries its forward, so a link that dies makes its ranks
``failed`` and a SIGKILLed ``connect`` (whose links die with it) leaves a session every later ``ps`` sees
ended. ``rtdebug stop`` on it signals only ``connect`` (its links die with it; the job runs on): the
remote pids are kept under ``tunnel`` and are never anything's to signal. Each ``refresh`` re-reads the
job (from its store, through the forward, so nothing runs on a node for it; else from the home node's
``ps --json``) and adds or removes forwards for ranks that appeared, moved or ended.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtdebug.common import log
from rtdebug.common.errors import HarnessError, printable, usage
from rtdebug.common.ports import free_port, is_port_free, port_holder
from rtdebug.common.procinfo import is_alive
from rtdebug.connect import listing
from rtdebug.connect.listing import RemoteRank, RemoteSession
from rtdebug.connect.secretsock import SecretServer
from rtdebug.connect.stacksrelay import RelayServer
from rtdebug.connect.transport import Forward, Link, Transport, check_node_name
from rtdebug.registry import signing
from rtdebug.registry.entry import LIVE_RANK_STATES, SCHEMA_VERSION, session_entry, write_json_atomic
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune

if TYPE_CHECKING:
    from rtdebug.views.ray import RayView
    from rtdebug.views.store import StoreView

LIST_TIMEOUT_S = 60.0
PICK_TRIES = 20  # free local ports tried for one rank when no --local-port-base is given


def warn(msg: str) -> None:
    print(f"rtdebug: warning: {printable(msg)}", file=sys.stderr, flush=True)


DEFAULT_REFRESH_S = 3.0
MIN_REFRESH_S, MAX_REFRESH_S = 0.1, 3600.0


@dataclass(frozen=True, kw_only=True)
class Options:
    """``rtdebug connect``'s options (the shell's ``ConnectCommandOptions`` is this class, built from its
    argparse namespace: same names), checked here once: a mistake is one line before any ssh starts."""

    host: str
    jump: str | None = None
    session: str | None = None
    store: str | None = None  # the job's store, as the home node reaches it (ps --store there)
    remote_rtdebug: str = "rtdebug"  # how the nodes run rtdebug: words, as a shell splits them
    ssh_config: str | None = None
    ssh_option: list[str] | None = None
    local_port_base: int | None = None
    refresh: float = DEFAULT_REFRESH_S
    ray_address: str | None = None  # a Ray cluster's GCS, as the home node reaches it: its Ray Train workers

    def __post_init__(self) -> None:
        check_node_name(self.host)
        if self.jump is not None and not self.jumps():
            raise usage(f"--jump {self.jump[:80]!r} names no host")
        for j in self.jumps():
            check_node_name(j, "jump host")
        if self.session and self.store:
            raise usage("--session and --store name the job two ways: give one")
        if self.store is not None and listing.split_store(self.store) is None:
            raise usage(f"--store {self.store[:80]!r}: expected HOST:PORT")
        if self.ray_address is not None:
            if self.store:
                raise usage("--ray-address and --store name two different jobs: give one")
            if listing.split_store(self.ray_address) is None:
                raise usage(
                    f"--ray-address {self.ray_address[:80]!r}: expected the GCS's HOST:PORT, as HOST reaches it"
                )
        if not MIN_REFRESH_S <= self.refresh <= MAX_REFRESH_S:  # nan fails both
            raise usage(f"--refresh must be {MIN_REFRESH_S:g}-{MAX_REFRESH_S:g} seconds, got {self.refresh:g}")
        if self.local_port_base is not None and not 1024 <= self.local_port_base <= 65535:
            raise usage(f"--local-port-base must be 1024-65535, got {self.local_port_base}")
        self._check_ssh_words()

    def _check_ssh_words(self) -> None:
        """What goes onto ssh's command lines as words: the remote command and the -o options."""
        try:
            words = shlex.split(self.remote_rtdebug or "")
        except ValueError as exc:  # an unclosed quote
            raise usage(f"--remote-rtdebug {self.remote_rtdebug[:80]!r}: {exc}") from None
        if not words:
            raise usage("--remote-rtdebug is empty")
        for o in self.ssh_option or []:
            if "=" not in o or o.startswith("-"):
                raise usage(f"--ssh-option {o[:80]!r}: expected NAME=VALUE (as ssh -o takes it)")

    def jumps(self) -> list[str]:
        return [j.strip() for j in (self.jump or "").split(",") if j.strip()]

    def remote_command(self) -> list[str]:
        """``--remote-rtdebug`` as the words ssh runs on a node."""
        return shlex.split(self.remote_rtdebug)


class Connection:
    def __init__(self, transport: Transport, opts: Options, registry: Registry | None = None) -> None:
        self.transport, self.opts = transport, opts
        self.reg = registry or Registry()
        self.links: dict[str, Link] = {}
        self.tunnels: dict[int, tuple[str, Forward]] = {}  # rank -> (node, forward)
        self.local_ports: dict[int, int] = {}  # rank -> its local port, kept across moves
        self.unreached: dict[str, str] = {}  # node -> the warning said about it (once, until it is reached)
        self.store_forward: Forward | None = None
        self.gcs_forward: Forward | None = None  # a Ray run's GCS, forwarded through the home link
        self.secret_server: SecretServer | None = None
        self.relay: RelayServer | None = None  # runs `stacks` on the home node for this user's `rtdebug stacks`
        self.sid: str | None = None
        self.remote: RemoteSession | None = None
        self.registered = False
        self.unverified = False
        self.written: dict[int, dict[str, Any]] = {}
        self.ports: list[int] = []  # rank -> its entry as last written (less updated_at)
        self.store_view: StoreView | None = None  # on the forwarded store: refresh reads it
        self.ray_view: RayView | None = None  # on the forwarded GCS (a Ray run): refresh reads it
        self.home_addrs: set[str] = set()  # the home node's own addresses (a Ray worker's node IP may be one)

    # -- the remote side -------------------------------------------------------------------------------------
    def _home(self) -> Link:
        link = self.links.get(self.opts.host)
        if link is None or not link.alive():
            if link is not None:
                link.close()
            link = self.links[self.opts.host] = self.transport.open(self.opts.host)
        return link

    def _list(self) -> listing.Listing:
        ray = self.opts.ray_address
        argv = [*self.opts.remote_command(), "ps", "--json", *(["--store", self.opts.store] if self.opts.store else [])]
        rc, out, err = self._home().run([*argv, *(["--ray-address", ray] if ray else [])], LIST_TIMEOUT_S)
        host = self.opts.host
        if ray and rc not in (0, 127, 255):
            why = err.removeprefix("rtdebug: error: ") or f"exit {rc}"
            raise HarnessError(f"{host} cannot read the Ray cluster at {ray}: {why}")
        if rc == 127:
            raise HarnessError(
                f"{host} has no `{self.opts.remote_command()[0]}` for ssh's commands ({err or 'command not found'}); "
                "give its path with --remote-rtdebug"
            )
        if rc == 255:
            raise HarnessError(f"lost the connection to {host}: {err}")
        if rc != 0:
            raise HarnessError(f"{host}: `rtdebug ps --json` failed (exit {rc}): {err or 'no message'}")
        return listing.parse(out, host)

    def _secret(self, home: Link, registry: str, sids: list[str]) -> str | None:
        """The job's secret, read over ssh into memory: the session's own (a Ray run's: its driver session's),
        else the user's default there."""
        files = (shlex.quote(f"{registry}/{sid}/{signing.SECRET_FILE}") for sid in sids)
        script = "".join(f"cat -- {f} 2>/dev/null || " for f in files)
        script += f'cat -- "${{XDG_CONFIG_HOME:-$HOME/.config}}/rtdebug/{signing.SECRET_FILE}" 2>/dev/null'
        rc, out, _ = home.run(["sh", "-c", script], 30)  # (from a worker thread: never opens a link)
        text = out[: signing.MAX_FILE].decode(errors="replace").strip()
        if rc != 0 or len(text) < signing.MIN_LEN or not text.isascii() or not text.isprintable() or " " in text:
            return None
        return text

    # -- the local session --------------------------------------------------------------------------------
    def _register(self, s: RemoteSession) -> None:
        sid = s.session_id
        with self.reg.lock():
            prune(self.reg)
            old = self.reg.read_session(sid)
            if old is not None:
                if is_alive(old["launcher_pid"], old["launcher_create_time"]):
                    raise HarnessError(
                        f"session {sid} is already here ({old['mode']}, pid {old['launcher_pid']}); end that first"
                    )
                shutil.rmtree(self.reg.session_dir(sid), ignore_errors=True)  # a connect that was killed
            elif self.reg.session_dir(sid).exists():
                shutil.rmtree(self.reg.session_dir(sid), ignore_errors=True)
            entry = session_entry(
                sid,
                "connected",
                script=str(s.entry.get("script", "")),
                nnodes=str(s.entry.get("nnodes", "1")),
                nproc_per_node=max(1, int(s.entry.get("nproc_per_node", 1) or 1)),
                host="127.0.0.1",
                port_base=1,
                ports=[],
                **{k: s.entry[k] for k in ("pg_timeout_s", "pg_timeout_source") if k in s.entry},
                connect={
                    "transport": self.transport.label,
                    "host": self.opts.host,
                    "jumps": list(getattr(self.transport, "jumps", [])),
                    "remote_session": sid,
                },
            )
            self.reg.write_new_session(entry)
        self.sid = sid
        self.registered = True

    def _rank_entry(self, r: RemoteRank, node: str, link: Link, port: int) -> dict[str, Any]:
        now = time.time()
        e: dict[str, Any] = {
            "node_rank": r.node_rank,
            "lazy": False,
            "wait": False,
            "attach_count": 0,
            "script": "",
            "cwd": "",
        }
        e.update(r.entry)
        e.update(
            schema_version=SCHEMA_VERSION,
            kind="rank",
            host="127.0.0.1",
            port=port,
            pid=link.pid,
            create_time=link.create_time,
            started_at=e.get("started_at", now),
            updated_at=now,
            tunnel={"node": node, "remote_host": r.host, "remote_port": r.port, "remote_pid": r.pid},
        )
        return e

    def _port_for(self, rank: int) -> int:
        if rank in self.local_ports:
            return self.local_ports[rank]
        base = self.opts.local_port_base
        if base is None:  # any free port: one taken between the pick and the check is no user's mistake
            for _ in range(PICK_TRIES):
                port = free_port()
                if port not in self.local_ports.values() and is_port_free(port):
                    self.local_ports[rank] = port
                    return port
            raise HarnessError(f"no free local port for rank {rank} after {PICK_TRIES} tries")
        port = base + rank
        if port > 65535:
            raise HarnessError(f"--local-port-base {base}: rank {rank} would get port {port}, above 65535", 2)
        if not is_port_free(port):
            holder = " ".join((port_holder(port) or "another process").split())  # a command line may hold newlines
            raise HarnessError(
                f"local port {port} (rank {rank}) is in use by {holder}: a stale tunnel? end it, or pick "
                "another --local-port-base"
            )
        self.local_ports[rank] = port
        return port

    def _addresses(self, home: Link) -> set[str]:
        """The home node's own IP addresses (``hostname -I`` there; junk is dropped), so a Ray worker there
        is reached through the home link, not a second one to its IP."""
        rc, out, _ = home.run(["hostname", "-I"], 30)
        words = out[:65536].decode(errors="replace").split() if rc == 0 else []
        return {w for w in words[:256] if listing.is_ip(w)}

    def _node_of(self, s: RemoteSession, r: RemoteRank) -> str:
        if s.entry.get("mode") == "ray":  # a Ray worker: its node by IP (listing checked it is one)
            here = self.home_addrs | set(listing.LOOPBACK)  # (a one-node cluster started on loopback)
            return self.opts.host if r.node_ip is None or r.node_ip in here else r.node_ip
        if s.home_node is None or r.node_rank == s.home_node:
            return self.opts.host
        addr = s.nodes.get(r.node_rank)
        if addr is None:
            raise HarnessError(f"rank {r.rank} runs on node {r.node_rank}, whose address the job does not say")
        return addr

    # -- start, refresh, close ----------------------------------------------------------------------------
    def start(self) -> RemoteSession:
        t0 = time.monotonic()

        def took(what: str) -> None:  # RTDEBUG_LOG=info: where connect's time goes
            log.info(f"connect: {what} at {time.monotonic() - t0:.3f} s")

        home = self._home()
        took(f"link to {home.node}")
        found = self._list()
        took("listing read")
        if self.opts.ray_address:
            s = listing.choose_ray(found, self.opts.session, self.opts.host, self.opts.ray_address)
            self.home_addrs = self._addresses(home)  # before any node is named: which workers run on HOST
        else:
            s = listing.choose(found, self.opts.session, self.opts.host)
        self.unverified = not s.verified
        self._register(s)
        assert self.sid is not None
        sids = [s.session_id, *([s.entry["parent_session"]] if "parent_session" in s.entry else [])]
        with ThreadPoolExecutor(1) as pool:  # the secret is read while the other nodes' links open
            pending = pool.submit(self._secret, home, found.registry, sids)
            self._forward_source(home, s)
            self.sync(s)
            took("every rank forwarded")
            secret = pending.result()
        took("secret read")
        self._follow(secret)
        return s

    def _forward_source(self, home: Link, s: RemoteSession) -> None:
        """Forward what the job is read from: its store, or a Ray run's GCS (as the home node reaches it)."""
        if self.opts.ray_address:
            gcs = listing.split_store(self.opts.ray_address)
            if gcs is not None:
                self.gcs_forward = Forward(free_port(), *gcs)
                home.forward([self.gcs_forward])
        elif s.store is not None:
            self.store_forward = Forward(free_port(), *s.store)
            home.forward([self.store_forward])

    def _follow(self, secret: str | None) -> None:
        """The secret served to this user's commands, the forwarded store or GCS opened for the refreshes,
        and the local session told where ``stacks`` asks the ranks."""
        assert self.sid is not None
        if secret is not None:
            self.secret_server = SecretServer(self.reg.session_dir(self.sid), secret)
        else:
            warn(f"no job secret readable on {self.opts.host}: `rtdebug stacks` from here cannot ask the job's ranks")
        if not self.opts.ray_address:  # (a Ray run's workers are asked through the forwarded GCS)
            remote = self.opts.remote_command()
            self.relay = RelayServer(self.reg.session_dir(self.sid), self.sid, remote, self._run_home)
        trust = ([secret] if secret else [], frozenset[str]())
        where: dict[str, str] = {}
        if self.store_forward is not None:
            from rtdebug.views.store import StoreView

            self.store_view = StoreView("127.0.0.1", self.store_forward.local_port, explicit=True, trust=trust)
            where["store"] = f"127.0.0.1:{self.store_forward.local_port}"
        if self.gcs_forward is not None:
            address = f"127.0.0.1:{self.gcs_forward.local_port}"
            try:
                from rtdebug.views.ray import RayView

                self.ray_view = RayView(address, trust)
                where["ray_address"] = address  # `stacks` here asks the workers through the forwarded GCS
            except ImportError:
                warn(
                    f"Ray is not installed here: `rtdebug stacks` from here cannot ask the workers, and each refresh "
                    f"runs `rtdebug ps` on {self.opts.host} (install the cluster's Ray version here for both)"
                )
        self.reg.update_session(self.sid, state="running", **where)

    def _run_home(self, argv: list[str], timeout: float) -> tuple[int, bytes, str]:
        """``argv`` on the home node, for the relay (from its thread: never opens a link, only uses one)."""
        link = self.links.get(self.opts.host)
        if link is None or not link.alive():
            raise HarnessError(f"the link to {self.opts.host} is down (connect reopens it at its next refresh)")
        return link.run(argv, timeout)

    def sync(self, s: RemoteSession) -> None:
        """Forwards and entries to match ``s``: new ranks get theirs, moved ones a new one, ended ones none."""
        assert self.sid is not None
        self.remote = s
        live = {r.rank: r for r in s.ranks if r.state in LIVE_RANK_STATES}
        want: dict[int, tuple[str, RemoteRank]] = {n: (self._node_of(s, r), r) for n, r in live.items()}
        self._open_links({node for node, _ in want.values()})
        self._reconcile(want)
        for r in s.ranks:
            self._write_rank(r, want)
        ports = sorted(self.local_ports.values())
        if ports != self.ports:
            self.reg.update_session(self.sid, ports=ports, port_base=ports[0] if ports else 1)
            self.ports = ports

    def _open_links(self, nodes: set[str]) -> None:
        """A live link to each of ``nodes`` (a dead one replaced: its forwards went with it); all connect at once."""
        missing = sorted(nodes - {n for n, lk in self.links.items() if lk.alive()})
        prestart = getattr(self.transport, "prestart", None)
        if prestart is not None and len(missing) > 1:
            prestart(missing)
        for node in missing:
            old = self.links.pop(node, None)
            if old is not None:
                old.close()
                self.tunnels = {k: v for k, v in self.tunnels.items() if v[0] != node}
            try:
                self.links.update(self.transport.open_many([node]))
            except HarnessError as exc:  # said once per node and reason, not at every refresh
                said = f"ranks on {node} are not forwarded: {exc.message}"
                if self.unreached.get(node) != said:
                    warn(said)
                self.unreached[node] = said
            else:
                self.unreached.pop(node, None)

    def _reconcile(self, want: dict[int, tuple[str, RemoteRank]]) -> None:
        gone: dict[str, list[Forward]] = {}
        for n, (node, f) in list(self.tunnels.items()):
            w = want.get(n)
            if w is None or w[0] != node or (w[1].host, w[1].port) != (f.remote_host, f.remote_port):
                gone.setdefault(node, []).append(f)
                del self.tunnels[n]
        for node, fs in gone.items():
            if node in self.links:
                self.links[node].cancel(fs)
        new: dict[str, list[Forward]] = {}
        for n, (node, r) in sorted(want.items()):
            if n not in self.tunnels and node in self.links:
                f = Forward(self._port_for(n), "127.0.0.1" if r.host in ("0.0.0.0", "::") else r.host, r.port)
                new.setdefault(node, []).append(f)
                self.tunnels[n] = (node, f)
        for node, fs in new.items():
            self.links[node].forward(fs)

    def _write_rank(self, r: RemoteRank, want: dict[int, tuple[str, RemoteRank]]) -> None:
        assert self.sid is not None
        if r.rank in self.tunnels:
            node, f = self.tunnels[r.rank]
            entry = self._rank_entry(r, node, self.links[node], f.local_port)
        elif r.rank in self.local_ports:  # ended (or its node is out of reach): no forward, not live
            entry = self._rank_entry(r, self.opts.host, self._home(), self.local_ports[r.rank])
            if entry["state"] in LIVE_RANK_STATES:
                node = want[r.rank][0] if r.rank in want else "?"
                entry.update(state="failed", error=f"its node {node} is out of reach")
        else:
            return
        same = {k: v for k, v in entry.items() if k != "updated_at"}
        if self.written.get(r.rank) != same:  # an idle refresh writes nothing
            write_json_atomic(self.reg.rank_path(self.sid, r.rank), entry)
            self.written[r.rank] = same

    def _from_store(self) -> RemoteSession | None:
        """The job as its store (a Ray run: its cluster's KV) says, read through the forward (nothing runs on
        a node for it); None: ask the home node (no store, or the store is gone or no longer lists the job as
        live)."""
        view = self.store_view if self.store_view is not None else self.ray_view
        if view is None or self.sid is None:
            return None
        try:
            found = view.session(self.sid)
        except Exception:  # OSError, HarnessError, Ray's RpcError: the home node is asked instead
            log.swallowed("connect: the job's store or GCS did not answer; asking the home node")
            return None
        if found is None:
            return None
        raw = json.dumps({"schema_version": SCHEMA_VERSION, "registry": "/", "sessions": [found]}).encode()
        live = listing.parse(raw, "the job's store").sessions
        return live[0] if live else None

    def refresh(self) -> bool:
        """Re-read the job (from its store, else from the home node); False once it has ended there."""
        assert self.remote is not None
        s = self._from_store()
        if s is None:
            found = [x for x in self._list().sessions if x.session_id == self.remote.session_id]
            if not found:
                return False
            s = found[0]
        self.sync(s)
        return any(r.state in LIVE_RANK_STATES for r in s.ranks)

    def close(self) -> None:
        """Every forward and link closed, the local session removed: nothing left running, bound or registered."""
        for server in (self.secret_server, self.relay):
            if server is not None:
                server.close()
        if self.store_view is not None:
            self.store_view.close()
        for link in self.links.values():
            link.close()
        self.links.clear()
        self.tunnels.clear()
        self.transport.close()
        if self.registered and self.sid is not None:
            shutil.rmtree(self.reg.session_dir(self.sid), ignore_errors=True)
            self.registered = False

    def summary(self) -> str:
        assert self.remote is not None and self.sid is not None
        nodes = {node for node, _ in self.tunnels.values()}
        ports = sorted(f.local_port for _, f in self.tunnels.values())
        span = f"local ports {ports[0]}-{ports[-1]}" if ports else "no rank forwarded yet"
        note = "  [unverified]" if self.unverified else ""
        ray = f" (Ray Train workers of the cluster at {self.opts.ray_address})" if self.opts.ray_address else ""
        return (
            f"rtdebug: connected to session {self.sid} on {self.opts.host}{ray}: {len(self.tunnels)} ranks on "
            f"{len(nodes)} nodes through {self.transport.label} ({span}){note}; Ctrl-C to disconnect"
        )
