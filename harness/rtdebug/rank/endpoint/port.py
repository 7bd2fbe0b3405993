"""A rank's debug endpoint: ready to attach on ``host:port`` at near-zero cost.

Plain ``debugpy.listen()`` in every rank slows a Python-heavy loop (~0.72x) and doubles ``import ray.train``
time even with no client attached. So the rank owns its port with a plain socket; debugpy is started only
when the first client connects (or at once with ``eager``; imported a minute in, in the background:
``rtdebug.rank.endpoint.warmup``), with pydevd's in-process adapter; bytes are relayed both ways (stock
attach configs work).

Why the in-process adapter: no adapter process can outlive the rank and keep a port bound, and there is one
hop fewer. Its cost: no automatic debugging of the rank's subprocesses (DataLoader workers), rarely needed.

Who gets in (``rtdebug.common.access``): the accept thread checks every connection
before debugpy sees a byte -- on this host only sockets of the rank's own uid,
from elsewhere only allow-listed addresses. What gets in (``rtdebug.rank.endpoint.dapgate``):
an admitted connection gets a thread of its own, which reads its first message
(bounded in size and time) and starts debugpy only if it is a DAP ``initialize``
request; pydevd then gets those bytes first. So a browser (it connects as the
owner) never reaches pydevd with an HTTP request, and a slow client never holds
up the accept thread. Refused connections are reset and counted; at most one line
a second goes to stderr and to ``on_refused`` (the registry's ``refused_count``),
the rest follow as a count (``rtdebug.rank.endpoint.refusals``). A refusal costs the rank
one accept, one netlink lookup and one reset (0.02 ms of CPU measured,
``bench/refusal_bench.py``); the backlog holds a flood so that the owner's
connect is queued, not dropped.

No second way in: ``debugpy.listen(in_process_debug_adapter=True)`` would leave
pydevd's own listener on an ephemeral 127.0.0.1 port that any local user could
connect to directly, bypassing the check. Instead pydevd's server socket is a
``Handoff``: while debugpy starts, pydevd's ``create_server_socket`` is swapped
for one returning it, and its ``accept()`` yields one end of a fresh
``socketpair()`` each time an admitted client arrives; the relay holds the other
end. So the rank has no listening socket but the checked one, with or without
``eager``/``wait``, and pydevd's accept loop still serves detach and re-attach.
If a debugpy release stops calling that hook, starting debugpy fails (closed), never falls back to an open port.

The accept and relay threads are marked ``pydev_do_not_trace`` and ``is_pydev_daemon_thread`` before they
start, or a breakpoint that suspends the process would freeze the relay that carries the client's ``continue``.

Speed: debugpy traces only while a client is connected -- an eager rank runs
untraced until one comes, and when the last one leaves the rank is resumed and
untraced again (``rtdebug.rank.endpoint.tracing``); each new connection gets a short GIL switch interval for
its handshake (``rtdebug.rank.endpoint.gil``); and debugpy's environment description (metadata
of every installed package, seconds on a first attach) is skipped when no
``DEBUGPY_LOG_DIR`` would receive it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

from rtdebug.common import log
from rtdebug.common.access import AllowList, Peer, judge
from rtdebug.common.errors import HarnessError
from rtdebug.common.ports import port_holder
from rtdebug.common.threads import hidden_thread
from rtdebug.rank.endpoint import gil, tracing, warmup
from rtdebug.rank.endpoint.dapgate import NotDAP, read_first
from rtdebug.rank.endpoint.pydevd_socket import Handoff, listen_via_handoff
from rtdebug.rank.endpoint.refusals import RefusalLog
from rtdebug.rank.endpoint.relay import DapHook, Relay

StateCallback = Callable[[str], None]
ATTACH_BOOST_S = 5.0
BACKLOG = 1024  # a flood of refused connects queues ahead of the owner's instead of dropping its SYN
MAX_PENDING = 64  # admitted connections still sending their first message; the oldest goes for a newer one
RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets, nothing lingers in TIME_WAIT


def debugger_active() -> bool:
    """True if this process already runs under a debugger (e.g. VS Code launched it)."""
    pydevd = sys.modules.get("pydevd")
    return pydevd is not None and getattr(pydevd, "GetGlobalDebugger", lambda: None)() is not None


class Endpoint:
    """One rank's debug port. Its surface: ``start``, ``start_debugpy``, ``wait_for_client``,
    ``client_connected``; what ``RankState.connect`` wires (``on_state``, ``on_refused``, ``label``) and reads
    (``lazy``, ``attach_count``, ``refused_count``); ``clients``; and for detach, ``close``, ``end_clients``
    and ``close_handoff`` (``rtdebug.rank.unadopt``)."""

    def __init__(
        self,
        host: str,
        port: int,
        on_state: StateCallback | None = None,
        *,
        allow: str = "",
        label: str | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.on_state = on_state or (lambda state: None)
        self.allow = AllowList(allow)
        self.label = label or f"port {port}"
        self.on_refused = on_refused or (lambda: None)
        self.on_dap: DapHook = lambda kind, body: None  # what the relay sees (``relay``): ``rtdebug.rank.allstop``
        self.attach_count = 0
        self.refused_count = 0
        self._clients = 0
        self._lock = threading.Lock()
        self._trace_lock = threading.Lock()  # orders tracing off (last client gone) / on (next one)
        self._inner: Handoff | None = None
        self._sock: socket.socket | None = None
        self._refusals = RefusalLog(self._report)
        self._pending: dict[socket.socket, Peer] = {}  # half-open: admitted, first message not yet read
        self._upstreams: set[socket.socket] = set()  # each attached client's end of the handoff (``end_clients``)

    @property
    def lazy(self) -> bool:
        return self._inner is None

    @property
    def clients(self) -> int:
        """How many clients are attached now."""
        return self._clients

    def close(self) -> None:
        """Close the listening socket: the accept thread ends, and no one else gets in."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept thread (close alone would not, on Linux)
            sock.close()

    def end_clients(self, within: float) -> None:
        """End every attached client's relay (its connection closes) and wait, at most ``within`` seconds,
        until each has ended. No state or refusal is reported from now on."""
        self.on_state = lambda state: None
        self.on_refused = lambda: None
        self.on_dap = lambda kind, body: None
        with self._lock:
            upstreams = list(self._upstreams)
        for s in upstreams:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + within
        while self._clients > 0 and time.monotonic() < deadline:
            time.sleep(0.01)

    def close_handoff(self) -> None:
        """pydevd's accept loop on the handoff ends (debugpy is being stopped); nothing if it never started."""
        if self._inner is not None:
            self._inner.close()

    def release_handoff(self) -> None:
        """Close what pydevd was handed and kept (``Handoff.release``); called once debugpy is stopped."""
        if self._inner is not None:
            self._inner.release()

    def start(self, eager: bool = False, warm_after: float = 0.0) -> None:
        """Bind and serve; ``eager`` starts debugpy now, else ``warm_after`` > 0 imports it in the
        background that many seconds from now, unless a client came first (``rtdebug.rank.endpoint.warmup``)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Without SO_REUSEADDR a restarted rank could not rebind while old connections sit in TIME_WAIT.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.host, self.port))
        except OSError:
            s.close()
            holder = port_holder(self.port) or "another process"
            raise HarnessError(
                f"debug port {self.port} is already in use by {holder}; pick another range with --debug-port-base"
            ) from None
        s.listen(BACKLOG)
        self._sock = s
        if eager:
            self.start_debugpy()
            self._untrace_if_alone()  # debugpy ready, nobody attached: run untraced until a client comes
        else:
            warmup.schedule(warm_after, lambda: self._inner is None)
        hidden_thread(self._accept_loop, f"rtdebug-accept-{self.port}")

    def _untrace_if_alone(self) -> None:
        with self._trace_lock:
            if self._clients == 0:
                tracing.off_quietly()

    def start_debugpy(self) -> Handoff:
        """Import and start debugpy once (idempotent); return the handoff that reaches it.

        On first attach this runs in the accept thread while the main thread may be busy in
        pure Python. Importing debugpy makes hundreds of file syscalls, each dropping the GIL
        and then waiting a whole switch interval (5 ms) to get it back: a first attach took
        up to 90 s that way on 3.11 under load. A short interval while starting avoids it.
        """
        with self._lock:
            if self._inner is None:
                os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
                with gil.boosted():
                    handoff = Handoff()
                    listen_via_handoff(handoff)
                    self._inner = handoff
            return self._inner

    def _accept_loop(self) -> None:
        assert self._sock is not None
        owner = os.geteuid()
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                peer = judge(client, self.allow, owner)  # zero cost while nobody connects
            except Exception as exc:  # fail closed
                log.swallowed("rank.endpoint: fail closed")
                peer = Peer("?", None, f"could not check the peer: {exc}")
            if not peer.reason:
                self._make_room()
                with self._lock:
                    self._pending[client] = peer
                try:
                    hidden_thread(self._serve, f"rtdebug-relay-{self.port}", client, peer)
                    continue
                except RuntimeError as exc:  # no thread to be had: refuse, keep accepting
                    with self._lock:
                        self._pending.pop(client, None)
                    peer.reason = f"could not start a thread for it ({exc})"
            self._refuse(client, peer)

    def _make_room(self) -> None:
        """At ``MAX_PENDING`` half-open connections, drop the oldest for the new one (its thread refuses it):
        connections that never finish their first message must not keep a real client out."""
        with self._lock:
            if len(self._pending) < MAX_PENDING:
                return
            oldest = next(iter(self._pending))
            self._pending.pop(oldest).dropped = f"dropped for a newer connection ({MAX_PENDING} were half-open)"
        try:
            oldest.shutdown(socket.SHUT_RDWR)  # wakes its reader; its own thread closes it
        except OSError:
            pass

    def _refuse(self, client: socket.socket, refusal: Peer) -> None:
        try:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        except OSError:
            pass
        client.close()
        with self._lock:
            self.refused_count += 1
        self._refusals.add(lambda: refusal.line)

    def _report(self, text: str) -> None:
        """A refusal line and the count, at most once a second (``RefusalLog``)."""
        print(f"rtdebug: {self.label}: {text}", file=sys.stderr, flush=True)
        try:
            self.on_refused()
        except Exception:  # recording the count must never stop the accept loop
            log.swallowed("rank.endpoint: recording the count must never stop the accept loop")

    def _serve(self, client: socket.socket, peer: Peer) -> None:
        """An admitted client, in its own thread: a DAP ``initialize`` first (``dapgate``), then debugpy."""
        try:
            first = read_first(client)
        except NotDAP as exc:
            peer.reason = peer.dropped or str(exc)
            self._refuse(client, peer)
            return
        finally:
            with self._lock:
                self._pending.pop(client, None)
        upstream = self._hand_over(client)
        if upstream is not None:
            self._relay(client, upstream, first)

    def _hand_over(self, client: socket.socket) -> socket.socket | None:
        """Start debugpy if need be and give pydevd a socket for this client; None (client closed) if not."""
        gil.boost(ATTACH_BOOST_S)  # the handshake: hundreds of GIL round trips (rtdebug.rank.endpoint.gil)
        try:
            upstream = self.start_debugpy().connect()  # pydevd reads nothing before the relay sends
        except Exception as exc:  # debugpy failed to start: tell the client by closing
            log.swallowed("rank.endpoint: debugpy failed to start: tell the client by closing")
            print(f"rtdebug: could not start debugpy on port {self.port}: {exc}", file=sys.stderr)
            client.close()
            return None
        with self._trace_lock:  # the count, tracing and the report move together (see ``_relay``'s end)
            tracing.on()  # before pydevd reads a byte: the client's breakpoints must bind
            with self._lock:
                self._clients += 1
                self.attach_count += 1
                self._upstreams.add(upstream)
            self.on_state("attached")
        self._tell("attached")
        return upstream

    def _tell(self, kind: str) -> None:
        try:
            self.on_dap(kind, {})
        except Exception:  # the rank's record never stops a client's relay
            log.swallowed("rank.endpoint: on_dap failed")

    def _relay(self, client: socket.socket, upstream: socket.socket, first: bytes) -> None:
        # every message is checked (junk never reaches pydevd); on_dap is looked up when used (``end_clients``)
        relay = Relay(client, upstream, self.label, lambda kind, body: self.on_dap(kind, body))
        why = relay.run(first, lambda back: hidden_thread(back, f"rtdebug-relay-up-{self.port}"))
        if why is not None:
            self._report(f"closed a client after its 'initialize': it sent {why}")
        client.close()
        upstream.close()
        # Under the lock a client coming in counts itself with: else one reconnecting now has ``ready`` last
        with self._trace_lock:
            with self._lock:
                self._clients -= 1
                self._upstreams.discard(upstream)
                left = self._clients
            if left == 0:
                tracing.client_gone()
                gil.end()
                self.on_state("ready")
        if left == 0:
            self._tell("detached")  # pydevd resumed the rank: it runs, and all-stop lets go of the others

    def client_connected(self) -> bool:
        if self._inner is None:
            return False
        import debugpy

        return debugpy.is_client_connected()

    def wait_for_client(self, timeout: float | None = None) -> bool:
        """Block until a client has attached and finished configuration (breakpoints set)."""
        self.start_debugpy()
        import debugpy

        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, lambda: debugpy.wait_for_client.cancel())
            timer.daemon = True
            timer.start()
        try:
            debugpy.wait_for_client()
        finally:
            if timer is not None:
                timer.cancel()
        connected = debugpy.is_client_connected()
        if not connected:
            self._untrace_if_alone()  # timed out: do not stay traced for a client that never came
        return connected
