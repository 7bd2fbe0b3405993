"""The job's DAP endpoint: one listening socket, one conversation per client, one child session per rank.

A client talks to it as to debugpy's adapter: ``initialize``, then ``attach``. If its ``initialize`` said
``supportsStartDebuggingRequest``, it gets ``initialized``, its ``attach`` succeeds, and a ``startDebugging``
reverse request follows for every chosen rank a client could attach to (``children``), then for each rank
that appears later; its child sessions attach to the ranks' own endpoints, which check them as any client.
A client without ``startDebugging`` gets an error response to ``attach`` naming what to use instead.

The parent session has no threads: breakpoints it is sent are acknowledged (and set by the client in each
child); ``terminate`` (or ``disconnect`` with ``terminateDebuggee``) stops the whole session, as ``rtdebug
stop`` does, every rank together; ``disconnect`` leaves the job running. Who gets in: only the owner's uid
(``rtdebug.common.access``), on loopback; the first message must be ``initialize`` (as a rank's dapgate).
Nothing is polled while no client is attached, but whether the session is still live (once a second).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rtdebug.common.access import AllowList, judge
from rtdebug.common.errors import HarnessError, printable
from rtdebug.common.threads import hidden_thread
from rtdebug.dap import children, relay, wire
from rtdebug.dap.children import RankChoice, RankKey
from rtdebug.registry.schema import ListedSession
from rtdebug.views.api import Views

POLL_S = 0.25  # how often an attached client's session is re-read for new ranks
LIVE_CHECK_S = 1.0  # how often the server checks that its session is still live
SETTLED_NS = 100_000_000  # a directory's change time is the kernel's coarse clock (a few ms a tick)
WAKE_S = 0.2  # how soon the accept loop sees ``done`` (set by SIGTERM, or a terminate)
END_WAIT_S = 0.2  # a client's writer busy past this (it reads nothing) is not told the session ended
TERMINATE_WAIT_S = 90.0  # a terminate in progress (its stop) is answered before the server closes
TERMINATE_MEANS = {  # by session mode: what rtdebug stop does to it
    "adopted": "detaches rtdebug from every rank (an adopted job runs on)",
    "connected": "ends this machine's connection to the job (rtdebug connect; the job runs on)",
    "": "ends the whole job, every rank together",
}
# clients that handle startDebugging without announcing it in initialize: Helix ("hx") does, when its parent
# session uses its TCP transport (its children connect to the parent's address, which the relay serves)
START_DEBUGGING_UNSAID = ("hx",)
CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsTerminateRequest": True,
    "supportTerminateDebuggee": True,
}


def no_start_debugging(session_id: str) -> str:
    return (
        "this client does not handle DAP's startDebugging request, which the job endpoint needs to hand it one "
        f"child session per rank; attach to each rank instead, one session per rank: `rtdebug attach --session "
        f"{session_id} --rank N` prints its host:port"
    )


class JobEndpoint:
    """The listening socket of one session's DAP endpoint, and its clients."""

    def __init__(
        self,
        views: Views,
        session_id: str,
        choice: RankChoice,
        port: int = 0,
        host: str = "127.0.0.1",
        log: TextIO = sys.stderr,
        watch: Path | None = None,
    ) -> None:
        """``watch``: the session's registry directory when every rank's entry is a file there (a local
        session): an attached client's look for new ranks is skipped while nothing in it was written."""
        self.views, self.session_id, self.choice, self.log, self.watch = views, session_id, choice, log, watch
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            self.sock.close()
            raise HarnessError(f"cannot listen on {host}:{port} for the DAP endpoint: {exc.strerror}") from None
        self.sock.listen(16)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self.done = threading.Event()  # the session is over (ended, or terminated through this endpoint)
        self.clients: list[Conversation] = []
        self._lock, self._say_lock = threading.Lock(), threading.Lock()
        self.last_refusal, self.unsaid = -1e9, 0
        # the session as last read, and the watched directory's settled change time it was read at (None: not
        # to be reused): an attach hands out its first children from it without reading every rank's files
        self.latest: tuple[int | None, ListedSession | None] = (None, None)

    def stamp(self) -> int | None:
        """The watched directory's change time (each entry write renames a file into it); None: always look.
        The live check (``serve``) does not depend on it: a process can die without writing."""
        if self.watch is None:
            return None
        try:
            return os.stat(self.watch).st_mtime_ns
        except OSError:
            return None

    def refresh(self) -> ListedSession | None:
        """Read the session now (None once it is over), and keep it for ``current``."""
        before = self.stamp()
        session = children.live_session(self.views, self.session_id)
        settled = before is not None and time.time_ns() - before > SETTLED_NS  # see Conversation.announce
        self.latest = (before if settled else None, session)
        return session

    def current(self) -> ListedSession | None:
        """The session: as last read while nothing in its directory has been written since, else read now."""
        stamp, session = self.latest
        if session is not None and stamp is not None and stamp == self.stamp():
            return session
        return self.refresh()

    def say(self, line: str) -> None:
        with self._say_lock:  # clients' threads say at once: whole lines, never run together
            print(f"rtdebug: {printable(line)}", file=self.log, flush=True)

    def serve(self) -> None:
        """Accept clients until the session is over; then tell every client and close."""
        checked = time.monotonic()
        try:
            while not self.done.is_set():
                ready, _, _ = select.select([self.sock], [], [], WAKE_S)
                if ready:
                    self._accept()
                elif time.monotonic() - checked >= LIVE_CHECK_S or self.latest[0] != self.stamp():
                    checked = time.monotonic()  # once a second, and once a write settled: an attach reads nothing
                    if self.refresh() is None:
                        self.done.set()
        finally:
            self.close()

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        peer = judge(conn, AllowList(), os.geteuid())
        if peer.reason:
            conn.close()
            self.refused(peer.line)
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # an event then a response: no 40 ms Nagle wait
        talk = Conversation(self, conn)
        with self._lock:
            self.clients = [c for c in self.clients if not c.closed.is_set() or c.stopping()] + [talk]
        hidden_thread(talk.run, "rtdebug-dap-client")

    def refused(self, line: str) -> None:
        """One line a second at most (a flood from another user must not flood your terminal), the rest counted."""
        now = time.monotonic()
        if now - self.last_refusal < 1.0:
            self.unsaid += 1
            return
        more = f" (and {self.unsaid} more refused since the last line)" if self.unsaid else ""
        self.last_refusal, self.unsaid = now, 0
        self.say(f"DAP endpoint: {line}{more}")

    def close(self) -> None:
        self.done.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        with self._lock:
            clients = list(self.clients)
        for c in clients:
            c.end("the session is over")
        for c in clients:  # a terminate's stop is finished (and its client told) before the process exits, even
            if c.terminating:  # when the client closed its socket once answered (nvim-dap does)
                c.stopped.wait(TERMINATE_WAIT_S)

    def terminate_means(self) -> str:
        """What ``terminate`` does to this session, as ``rtdebug stop`` does it (its view's teardown)."""
        session = self.views.session(self.session_id)
        return TERMINATE_MEANS.get(str(session.get("mode") if session else None), TERMINATE_MEANS[""])

    def stop_session(self) -> str:
        """End the whole session as ``rtdebug stop`` does (its view's teardown); the one-line summary."""
        session = self.views.session(self.session_id)
        if session is None:
            raise HarnessError(f"session {self.session_id} has ended")
        summary = self.views.view_of(session).stop(session)
        return summary.removeprefix("rtdebug: ")


class Conversation:
    """One client of the job endpoint: its requests, and the child sessions it is handed."""

    def __init__(self, server: JobEndpoint, conn: socket.socket) -> None:
        self.server, self.conn = server, conn
        self.closed = threading.Event()
        self.terminating = False  # this client asked to end the job: it is answered, then closed, by itself
        self.stopped = threading.Event()  # the stop that its terminate started is over (done or failed)
        self.seq = 0
        self.wlock = threading.Lock()
        self.client_caps: wire.Message = {}
        self.initialize: wire.Message = {}  # the client's initialize request (a relayed child's goes on to its rank)
        self.upstream: tuple[socket.socket, Any] | None = None  # a relayed child: its rank's socket and reader
        self.attach_args: wire.Message = {}
        self.seen: set[RankKey] = set()
        self.pending: dict[int, str] = {}  # startDebugging seq -> child name
        self.states: dict[int, str] = {}  # rank -> its debug state as last told to the client (an output event)
        self.handlers: dict[str, Callable[[wire.Message], None]] = {
            "initialize": self.on_initialize,
            "attach": self.on_attach,
            "launch": self.on_launch,
            "setBreakpoints": self.on_set_breakpoints,
            "setExceptionBreakpoints": self.ok,
            "setFunctionBreakpoints": self.on_set_breakpoints,
            "configurationDone": self.ok,
            "threads": lambda req: self.respond(req, body={"threads": []}),
            "disconnect": self.on_disconnect,
            "terminate": self.on_terminate,
        }

    # -- wire ---------------------------------------------------------------
    def send(self, msg: wire.Message, child: str = "") -> None:
        """Send ``msg`` with the next seq; ``child``: a startDebugging request for that child, whose
        response is then expected."""
        with self.wlock:
            self.seq += 1
            msg["seq"] = self.seq
            if child:
                self.pending[self.seq] = child
            try:
                self.conn.sendall(wire.encode(msg))
            except OSError:
                self.closed.set()

    def respond(self, req: wire.Message, body: wire.Message | None = None, error: str = "") -> None:
        msg: wire.Message = {"type": "response", "request_seq": req.get("seq", 0), "command": req.get("command", "")}
        msg["success"] = not error
        if error:
            msg["message"] = error
        if body is not None:
            msg["body"] = body
        self.send(msg)

    def event(self, name: str, body: wire.Message | None = None) -> None:
        self.send({"type": "event", "event": name, **({"body": body} if body is not None else {})})

    def output(self, text: str) -> None:
        self.event("output", {"category": "console", "output": f"rtdebug: {text}\n"})

    def ok(self, req: wire.Message) -> None:
        self.respond(req)

    def end(self, why: str) -> None:
        """Tell the client its session is over (``terminated``) and close the connection."""
        if self.closed.is_set() or (self.terminating and why != "terminated"):
            return
        if self.upstream is not None:  # a relayed child: the rank's bytes go to it, never one of ours
            self.closed.set()
            with contextlib.suppress(OSError):
                self.conn.shutdown(socket.SHUT_RDWR)
            return
        # a client that reads nothing (its buffers full) must not hold the session's end: the last event is
        # sent only if the conversation's writer is free within END_WAIT_S and it fits the socket's buffer now
        if self.wlock.acquire(timeout=END_WAIT_S):
            try:
                self.seq += 1
                last = wire.encode({"type": "event", "event": "terminated", "seq": self.seq})
                with contextlib.suppress(OSError):
                    self.conn.send(last, socket.MSG_DONTWAIT)
            finally:
                self.wlock.release()
        self.closed.set()
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)

    def stopping(self) -> bool:
        """Its terminate's stop is still under way (its connection may be closed already)."""
        return self.terminating and not self.stopped.is_set()

    # -- the conversation ---------------------------------------------------
    def run(self) -> None:
        f = self.conn.makefile("rb")
        try:
            first = True
            while not self.closed.is_set():
                msg = wire.read_message(f)
                if msg is None:
                    break
                if first and not (msg.get("type") == "request" and msg.get("command") == "initialize"):
                    raise wire.WireError("its first message is not a DAP initialize request")
                first = False
                self.dispatch(msg)
                if self.upstream is not None:
                    self.relay_rest(f, *self.upstream)
                    break
        except (wire.WireError, OSError) as exc:
            if not self.closed.is_set():  # a client the endpoint ended itself (its close) is not news
                self.server.say(f"DAP endpoint: closed a client: {exc}")
        finally:
            self.closed.set()
            with contextlib.suppress(OSError):
                f.close()
                self.conn.close()

    def dispatch(self, msg: wire.Message) -> None:
        if msg["type"] == "response":
            self.on_reverse_response(msg)
            return
        if msg["type"] != "request" or not isinstance(msg.get("command"), str):
            return
        if not isinstance(msg.get("arguments", {}), dict):
            msg["arguments"] = {}
        handler = self.handlers.get(msg["command"])
        if handler is None:
            why = f"the job endpoint has no threads of its own: send {msg['command']!r} to a rank's child session"
            self.respond(msg, error=printable(why)[:300])
            return
        handler(msg)

    def on_initialize(self, req: wire.Message) -> None:
        self.client_caps = dict(req.get("arguments") or {})
        self.initialize = req
        self.respond(req, body=CAPABILITIES)

    def on_attach(self, req: wire.Message) -> None:
        sid = self.server.session_id
        if "rtdebugRank" in req["arguments"]:  # a child that came back here, as debugpy's children do
            self.relay_child(req)
            return
        says = self.client_caps.get("supportsStartDebuggingRequest") is True
        if not says and self.client_caps.get("clientID") not in START_DEBUGGING_UNSAID:
            self.respond(req, error=no_start_debugging(sid))
            return
        self.attach_args = dict(req.get("arguments") or {})
        self.event("initialized")
        self.respond(req)
        self.announce_new(self.server.current())  # the ranks there are now, at once; the thread looks for more
        what = self.server.terminate_means()
        self.output(f"session {sid}: one child session per rank ({self.server.choice.text}); terminate {what}")
        hidden_thread(self.announce, "rtdebug-dap-children")

    def relay_child(self, req: wire.Message) -> None:
        """Open the named rank for this child, give it the rank's capabilities, pass its attach on."""
        session = children.live_session(self.server.views, self.server.session_id)
        entry = relay.find(session, req["arguments"]["rtdebugRank"]) if session is not None else None
        if entry is None:
            mark = printable(str(req["arguments"]["rtdebugRank"]))[:100]
            self.respond(req, error=f"no attachable rank {mark} in session {self.server.session_id}")
            return
        try:
            sock, reader, caps = relay.open_rank(entry, self.initialize)
        except (OSError, wire.WireError) as exc:
            self.respond(req, error=printable(f"could not open rank {entry['rank']}'s endpoint: {exc}")[:300])
            return
        self.event("capabilities", {"capabilities": caps})
        with contextlib.suppress(OSError):
            sock.sendall(wire.encode(req))
        self.upstream = (sock, reader)

    def relay_rest(self, f: Any, sock: socket.socket, reader: Any) -> None:
        """Copy bytes between the child and its rank until either side ends (this thread: child -> rank)."""
        hidden_thread(relay.pump, "rtdebug-dap-relay", reader, self.conn)
        try:
            relay.pump(f, sock)
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def on_launch(self, req: wire.Message) -> None:
        self.respond(req, error="the job endpoint only attaches (request: attach): the job is already running")

    def on_set_breakpoints(self, req: wire.Message) -> None:
        wanted = req["arguments"].get("breakpoints") or []
        n = len(wanted) if isinstance(wanted, list) else 0
        note = {"verified": False, "message": "set in each rank's child session"}
        self.respond(req, body={"breakpoints": [dict(note) for _ in range(n)]})

    def on_disconnect(self, req: wire.Message) -> None:
        if req["arguments"].get("terminateDebuggee") is True:
            self.on_terminate(req)
            return
        self.respond(req)
        self.closed.set()

    def on_terminate(self, req: wire.Message) -> None:
        """Answered at once (a client may wait only seconds); the stop follows, then ``terminated``."""
        self.terminating = True
        try:
            self.respond(req)
            self.output(f"session {self.server.session_id}: terminate {self.server.terminate_means()}")
            try:
                summary = self.server.stop_session()
            except HarnessError as exc:
                self.terminating = False
                self.output(f"could not stop the session: {exc.message}")
                self.server.say(f"DAP endpoint: could not stop the session: {exc.message}")
                return
            self.server.done.set()
            self.server.say(f"DAP endpoint: {summary} (terminate from a client)")
            self.output(summary)
            self.end("terminated")
        finally:
            self.stopped.set()

    def on_reverse_response(self, msg: wire.Message) -> None:
        seq = msg.get("request_seq")
        name = self.pending.pop(seq, None) if isinstance(seq, int) else None
        if name is not None and not msg.get("success"):
            text = printable(str(msg.get("message") or "no reason given"))[:300]
            self.server.say(f"DAP endpoint: the client did not start {name}: {text}")

    # -- the children -------------------------------------------------------
    def announce_new(self, session: ListedSession | None = None) -> bool:
        """A ``startDebugging`` for each chosen rank that became attachable since the last look (``session``:
        as just read, else the server's, read once per change however many look); False once the session is
        over."""
        session = session or self.server.current()
        if session is None:
            return False
        for entry in children.new_ranks(session, self.server.choice, self.seen):
            self.seen.add(children.key_of(entry))
            config = children.child_configuration(entry, self.attach_args)
            request = {"request": "attach", "configuration": config}
            self.send({"type": "request", "command": "startDebugging", "arguments": request}, config["name"])
        for line in children.state_lines(session, self.server.choice, self.states):
            self.output(line)
        return True

    def announce(self) -> None:
        """Hand the client a child session for each chosen rank as it becomes attachable, until it leaves."""
        seen: int | None = None
        while not self.closed.wait(POLL_S) and not self.server.done.is_set():
            now = self.server.stamp()
            if now is not None and now == seen:
                continue  # no registry file of the session was written: nothing new to hand out or tell
            # a stamp is trusted once it is older than the clock's tick: a write in the same tick keeps it
            seen = now if now is not None and time.time_ns() - now > SETTLED_NS else None
            if not self.announce_new():
                break
        if not self.closed.is_set():
            self.end("the session is over")
