"""The first bytes of an admitted connection must be one DAP ``initialize`` request, or nothing reaches pydevd.

Why: a browser runs as the port's owner, so its socket passes the uid check (``rtdebug.common.access``).
``fetch('http://127.0.0.1:5678/', {method: 'POST', mode: 'no-cors', body: '{..."command":"evaluate"...}'})``
sends a request line and headers, one of them ``Content-Length``; pydevd skips to that header and runs
the body. A web page cannot choose a connection's first bytes: they are a request line (HTTP, also a
WebSocket upgrade) or a TLS ClientHello. Every DAP client (VS Code, the Python Debugger extension,
``rtdebug attach`` configs) opens with ``Content-Length: N\\r\\n\\r\\n`` and an ``initialize`` request, so that
is all this admits: one header line, then a JSON object with ``"type": "request"`` and
``"command": "initialize"``. Anything else is refused as soon as its first bytes show it.

Bounded: the header must be ``Content-Length`` alone, the message at most ``MAX_MESSAGE`` bytes, and it
must arrive within ``DEADLINE_S``. ``read_first`` runs in the connection's own thread, never the accept
thread, so a slow client holds up no one else.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable

MAX_MESSAGE = 65536
DEADLINE_S = 5.0
PREFIX = b"content-length:"
_HEADER = re.compile(rb"content-length:[ \t]{0,8}(\d{1,9})[ \t]{0,8}\r\n\r\n", re.IGNORECASE)
_PARTIAL = re.compile(rb"[ \t]{0,8}(\d{1,9}[ \t]{0,8}(\r(\n\r?)?)?)?")  # what may follow PREFIX before \r\n\r\n
_WEBSOCKET = re.compile(rb"\r\nupgrade:[ \t]*websocket", re.IGNORECASE)
HTTP_METHODS = (b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"PATCH", b"CONNECT", b"TRACE", b"PRI")
BAD_HEADER = "a DAP header other than 'Content-Length: N'"


class NotDAP(ValueError):
    """Why a connection's first bytes are not a DAP ``initialize`` request (the refusal line's reason)."""


def _show(data: bytes, limit: int = 60) -> str:
    """Untrusted bytes as a short, printable, quoted text."""
    return ascii(data[:limit].decode("latin-1"))


def describe(data: bytes) -> str:
    """What a connection that does not start like DAP looks like, for the refusal line."""
    if data[:1] == b"\x16" and data[1:2] in (b"", b"\x03"):
        return "a TLS handshake, not DAP"
    line = data.split(b"\n", 1)[0].rstrip(b"\r")
    if line.split(b" ", 1)[0] in HTTP_METHODS and b" " in line:
        kind = "a WebSocket upgrade" if _WEBSOCKET.search(data) else "an HTTP request"
        return f"{kind} ({_show(line)}), not DAP"
    return f"not DAP: it starts with {_show(data, 16)}, not 'Content-Length: '"


def check_initialize(body: bytes | bytearray) -> None:
    """Raise ``NotDAP`` unless ``body`` is a JSON ``initialize`` request."""
    try:
        msg = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise NotDAP("the first DAP message is not JSON") from None
    if not isinstance(msg, dict):
        raise NotDAP("the first DAP message is not a JSON object")
    kind, command = msg.get("type"), msg.get("command")
    if kind != "request" or command != "initialize":
        shown = ", ".join(ascii(str(v)[:40]) for v in (kind, command))
        raise NotDAP(f"the first DAP message is ({shown}), not an 'initialize' request")


def message_end(buf: bytes | bytearray) -> int | None:
    """The length of the first message if ``buf`` starts with a whole DAP ``initialize`` request; None if
    more bytes may still make one; ``NotDAP`` if they cannot."""
    head = bytes(buf[: len(PREFIX)]).lower()
    if head != PREFIX[: len(head)]:
        raise NotDAP(describe(bytes(buf[:512])))
    end = buf.find(b"\r\n\r\n", 0, 64)
    if end < 0:
        if len(buf) > len(PREFIX) and not _PARTIAL.fullmatch(buf[len(PREFIX) : 64]):
            raise NotDAP(BAD_HEADER)
        return None
    match = _HEADER.fullmatch(buf[: end + 4])
    if match is None:
        raise NotDAP(BAD_HEADER)
    start, size = end + 4, int(match[1])
    if start + size > MAX_MESSAGE:
        raise NotDAP(f"a first DAP message of {size} bytes, over the {MAX_MESSAGE}-byte limit")
    if len(buf) < start + size:
        return None
    check_initialize(buf[start : start + size])
    return start + size


class DapFramer:
    """Checks the client's bytes after its ``initialize``: each must be a whole DAP message, a
    ``Content-Length: N`` header and a JSON object with a ``type``, as every DAP client sends. Junk there
    would reach pydevd, which prints tracebacks into the job's log; the relay closes the connection instead.
    Bounded as the first message: a header of at most 64 bytes, a message of at most ``MAX_BODY``."""

    MAX_BODY = 16 << 20  # setBreakpoints of a huge file, evaluate of a long expression: generous, bounded

    def __init__(self) -> None:
        self.buf = bytearray()

    def take(self, data: bytes) -> list[tuple[bytes, dict]]:
        """Take ``data``; return the messages it completes (each as its bytes and its JSON), keeping the rest
        for the next call; raise ``NotDAP`` as soon as the bytes cannot be DAP messages."""
        self.buf += data
        done: list[tuple[bytes, dict]] = []
        while self.buf:
            head = bytes(self.buf[: len(PREFIX)]).lower()
            if head != PREFIX[: len(head)]:
                raise NotDAP(describe(bytes(self.buf[:512])))
            end = self.buf.find(b"\r\n\r\n", 0, 64)
            if end < 0:
                if len(self.buf) > len(PREFIX) and not _PARTIAL.fullmatch(self.buf[len(PREFIX) : 64]):
                    raise NotDAP(BAD_HEADER)
                return done
            match = _HEADER.fullmatch(self.buf[: end + 4])
            if match is None:
                raise NotDAP(BAD_HEADER)
            start, size = end + 4, int(match[1])
            if size > self.MAX_BODY:
                raise NotDAP(f"a DAP message of {size} bytes, over the {self.MAX_BODY}-byte limit")
            if len(self.buf) < start + size:
                return done
            try:
                msg = json.loads(self.buf[start : start + size])
            except (ValueError, RecursionError):
                raise NotDAP("a DAP message that is not JSON") from None
            if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
                raise NotDAP("a DAP message that is not a JSON object with a 'type'")
            done.append((bytes(self.buf[: start + size]), msg))
            del self.buf[: start + size]
        return done


def read_first(
    sock: socket.socket, deadline_s: float = DEADLINE_S, clock: Callable[[], float] = time.monotonic
) -> bytes:
    """Read until ``sock`` has sent a whole ``initialize`` request; return every byte read (the request and
    any that came after it), for the caller to pass on first. Raises ``NotDAP``; leaves ``sock`` blocking."""
    deadline = clock() + deadline_s
    buf = bytearray()
    while True:
        left = deadline - clock()
        if left <= 0:
            raise NotDAP(f"no complete DAP message within {deadline_s:g} s")
        try:
            sock.settimeout(left)
            chunk = sock.recv(MAX_MESSAGE - len(buf))
        except TimeoutError:
            raise NotDAP(f"no complete DAP message within {deadline_s:g} s") from None
        except OSError as exc:
            raise NotDAP(f"the connection failed before a complete DAP message ({exc.strerror or exc})") from None
        if not chunk:
            raise NotDAP("closed before a complete DAP message")
        buf += chunk
        if message_end(buf) is not None:
            sock.settimeout(None)
            return bytes(buf)
        if len(buf) >= MAX_MESSAGE:  # cannot happen with the header bounded; never loop on a full buffer
            raise NotDAP(f"no complete DAP message within {MAX_MESSAGE} bytes")
