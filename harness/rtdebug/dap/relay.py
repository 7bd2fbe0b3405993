"""A child session that comes back to the job endpoint is relayed to its rank.

debugpy's children connect to the same adapter as their parent, and clients built around that (Emacs dape
starts a child with its parent's host and port) do the same here. Such a child's ``attach`` carries the
``rtdebugRank`` marker of its ``startDebugging`` configuration; the endpoint finds that rank in the session
(in the registry, never where the client says it is), opens the rank's own endpoint as any client would
(``initialize`` first, the rank checks us as it checks everyone), hands the client the rank's capabilities
(a ``capabilities`` event: the endpoint answered its ``initialize`` before it knew the rank), sends the
``attach`` on, and then only copies bytes both ways until either side closes.
"""

from __future__ import annotations

import contextlib
import io
import socket
from typing import Any

from rtdebug.dap import children, wire
from rtdebug.registry.schema import ListedSession, RankEntry

CONNECT_TIMEOUT_S = 10.0
CHUNK = 1 << 16


def find(session: ListedSession, mark: Any) -> RankEntry | None:
    """The session's verified, attachable rank that ``mark`` names (rank and pid), else None."""
    if not isinstance(mark, dict):
        return None
    local = session.get("source", "local") == "local"
    for entry in session.get("ranks", []):
        if entry.get("verified") is False or children.marker(entry) != {
            "rank": mark.get("rank"),
            "pid": mark.get("pid"),
        }:
            continue
        return entry if children.attachable(entry, local) else None
    return None


def open_rank(entry: RankEntry, initialize: wire.Message) -> tuple[socket.socket, io.BufferedReader, wire.Message]:
    """Connect to the rank, send the client's ``initialize``; the socket, its reader, and the rank's
    capabilities (its answer, which the client does not see: it had the endpoint's)."""
    sock = socket.create_connection(children.rank_address(entry), timeout=CONNECT_TIMEOUT_S)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(wire.encode(initialize))
        f = sock.makefile("rb")
        while True:
            msg = wire.read_message(f)
            if msg is None:
                raise wire.WireError("the rank closed the connection before answering initialize")
            if msg.get("type") == "response" and msg.get("request_seq") == initialize.get("seq"):
                if not msg.get("success"):
                    raise wire.WireError(f"the rank refused initialize: {str(msg.get('message'))[:200]}")
                sock.settimeout(None)
                return sock, f, msg.get("body") or {}
    except BaseException:
        sock.close()
        raise


def pump(src: io.BufferedReader, dst: socket.socket) -> None:
    """Copy what ``src`` yields to ``dst`` until ``src`` ends; then end ``dst``'s writing side."""
    try:
        while True:
            data = src.read1(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
