"""``rtdebug stacks`` on this machine for a connected job that has no store to ask: the node's own
``rtdebug stacks --json``, run there over ``connect``'s link to it.

A single-node job publishes nothing to a store (by design: its ranks are all on one node, and that node's
``stacks`` signals them), so the laptop cannot ask its ranks job-wide. ``connect`` holds the one ssh master
that reaches the node, so it runs the command for the user: it listens on ``relay.sock`` in its owner-only
session directory, answers only processes of the user's own uid (``SO_PEERCRED``), and takes a request of
typed fields only (``StacksRequest``: the ranks, timeout, ``--native``, ``--history``), never a command line.
It runs ``REMOTE stacks --json --session ID ...`` on the home node, whose output (bounded by the link) goes
back as it is; the requester reads it as hostile input (``rtdebug.connect.remotesnap``).

Wire: the request is one JSON line; the answer one JSON line ``{"rc": int, "err": str}``, then the command's
standard output until the socket closes. Bound through ``/proc/self/fd`` (a socket path's 108 bytes).
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError, printable
from rtdebug.connect.secretsock import private_socket
from rtdebug.registry.schema import SessionEntry

RELAY_SOCKET = "relay.sock"
MAX_REQUEST = 4096
MAX_ANSWER = (8 << 20) + 4096  # the link's bound on a remote command's output, and the header
MAX_BUSY = 4  # requests run at once; more are refused (each one is an ssh session on the node)
SLACK_S = 30.0  # the remote command's start (ssh, Python) and its --native (py-spy) beyond --timeout
HISTORY_MAX = 64
RANK_SPEC = re.compile(r"[0-9A-Za-z_][0-9A-Za-z_,=*-]{0,199}")  # 0,2-3 or dp=0,tp=* (never an option)

Runner = Callable[[list[str], float], tuple[int, bytes, str]]


@dataclass(frozen=True)
class StacksRequest:
    """What a ``stacks`` here may ask of the node: typed fields, each checked (``check``)."""

    rank: str | None = None
    timeout: float = 3.0
    native: bool = False
    history: int | None = None
    snapshot: bool = False  # the one-instant verdict (no second look at the positions)

    def check(self) -> StacksRequest:
        ok = self.rank is None or (isinstance(self.rank, str) and RANK_SPEC.fullmatch(self.rank) is not None)
        t = self.timeout
        ok = ok and isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t <= 600
        ok = ok and isinstance(self.native, bool) and isinstance(self.snapshot, bool)
        h = self.history
        ok = ok and (h is None or (isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= HISTORY_MAX))
        if not ok:
            raise HarnessError("not a stacks request this connect takes")
        return self

    def argv(self, remote: list[str], session_id: str) -> list[str]:
        """The node's command: its rtdebug's ``stacks --json`` for the session, these options only."""
        out = [*remote, "stacks", "--json", "--session", session_id, "--timeout", f"{float(self.timeout):g}"]
        out += ["--rank", self.rank] if self.rank is not None else []
        out += ["--native"] if self.native else []
        out += ["--history", str(self.history)] if self.history is not None else []
        out += ["--snapshot"] if self.snapshot else []
        return out

    @classmethod
    def parse(cls, raw: bytes) -> StacksRequest:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or data.get("op") != "stacks":
            raise HarnessError("not a stacks request this connect takes")
        args = (data.get("rank"), data.get("timeout", 3.0), data.get("native", False), data.get("history"))
        return cls(*args, data.get("snapshot", False)).check()


def _uid_of(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class RelayServer:
    """``connect``'s side: ``run`` runs an argv on the home node (its link's ``run``, bounded)."""

    def __init__(self, session_dir: Path, session_id: str, remote: list[str], run: Runner) -> None:
        self.path = session_dir / RELAY_SOCKET
        self.session_id, self.remote, self.run = session_id, list(remote), run
        self._busy = threading.BoundedSemaphore(MAX_BUSY)
        self._sock = private_socket(session_dir, RELAY_SOCKET)
        self._closed = False
        threading.Thread(target=self._serve, name="rtdebug-connect-relay", daemon=True).start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if not self._busy.acquire(blocking=False):
                self._reply(conn, -1, f"connect is already running {MAX_BUSY} stacks requests; try again")
                continue
            threading.Thread(target=self._one, args=(conn,), name="rtdebug-connect-relay-1", daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if _uid_of(conn) != os.geteuid():
                conn.close()
                return
            conn.settimeout(5)
            raw = b""
            while b"\n" not in raw and len(raw) <= MAX_REQUEST and (chunk := conn.recv(MAX_REQUEST)):
                raw += chunk
            try:
                req = StacksRequest.parse(raw.split(b"\n", 1)[0])
                rc, out, err = self.run(req.argv(self.remote, self.session_id), req.timeout + SLACK_S)
            except HarnessError as exc:
                rc, out, err = -1, b"", exc.message
            self._reply(conn, rc, err, out)
        except OSError:
            conn.close()
        finally:
            self._busy.release()

    @staticmethod
    def _reply(conn: socket.socket, rc: int, err: str, out: bytes = b"") -> None:
        try:
            conn.settimeout(30)
            conn.sendall(json.dumps({"rc": rc, "err": err[:2000]}).encode() + b"\n" + out)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.path.unlink()
        except OSError:
            pass


def ask(session_dir: Path, req: StacksRequest, host: str) -> tuple[int, bytes, str]:
    """(exit code, output, error line) of ``req`` run on the node by the session's ``connect``; one line
    (``HarnessError``) when there is no ``connect`` of this user's to ask, or it does not answer."""
    req.check()
    try:
        fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise HarnessError(f"cannot read the connected session's directory: {exc.strerror}") from None
    where = f"/proc/self/fd/{fd}/{RELAY_SOCKET}"
    try:
        st = os.lstat(where)
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(0, "not a socket of yours")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(where)
            if _uid_of(s) != os.getuid():
                raise OSError(0, "its connect is another user's")
            body = {"op": "stacks", "rank": req.rank, "timeout": req.timeout, "native": req.native}
            s.sendall(json.dumps(dict(body, history=req.history, snapshot=req.snapshot)).encode() + b"\n")
            data = _read_all(s, time.monotonic() + req.timeout + SLACK_S + 10)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise HarnessError(f"cannot ask this session's `rtdebug connect` to run stacks on {host}: {why}") from None
    finally:
        os.close(fd)
    return _answer(data, host)


def _read_all(s: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OSError(0, "no answer in time")
        s.settimeout(left)
        chunk = s.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER:
            raise OSError(0, f"its answer is over {MAX_ANSWER} bytes")
        chunks.append(chunk)


def _answer(data: bytes, host: str) -> tuple[int, bytes, str]:
    head, _, out = data.partition(b"\n")
    try:
        h = json.loads(head)
    except ValueError:
        h = None
    if not isinstance(h, dict) or not isinstance(h.get("rc"), int) or not isinstance(h.get("err"), str):
        raise HarnessError(f"this session's `rtdebug connect` gave no answer for {host} (it may be ending)")
    return h["rc"], out, printable(h["err"][:2000])


def stacks(session_dir: Path, session: SessionEntry, req: StacksRequest) -> dict[str, Any]:
    """The snapshot of a connected ``session``, taken on its home node by that node's own ``rtdebug stacks``
    (through this session's ``connect``), read as hostile input; one line when it cannot be had."""
    from rtdebug.connect import remotesnap

    info = session.get("connect") or {}
    host = str(info.get("host") or "the node")
    sid = str(info.get("remote_session") or session["session_id"])
    rc, out, err = ask(session_dir, req, host)
    if rc == 2:  # the node's usage error (a --rank that selects no rank): the user's mistake, said as theirs
        raise HarnessError(err.removeprefix("rtdebug: error: ") or f"{host}: rtdebug stacks: usage", 2)
    if rc != 0:
        why = err.removeprefix("rtdebug: error: ") or f"exit {rc}"
        raise HarnessError(f"{host}: `rtdebug stacks` failed: {why}")
    snap = remotesnap.parse(out, sid, host)
    there = snap.get("source")
    snap["session_id"] = session["session_id"]
    snap["source"] = f"{info.get('transport') or 'ssh'} link to {host}" + (f" (and there the {there})" if there else "")
    return snap
