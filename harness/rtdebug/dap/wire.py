"""DAP's framing (``Content-Length: N`` headers, a blank line, N bytes of JSON), read as hostile input.

A peer gets at most ``MAX_HEADERS`` header lines of ``MAX_HEADER_LINE`` bytes and a body of ``MAX_BODY``
bytes; anything else (no length, a bad length, a body that is not one JSON object) is a ``WireError`` and
the connection is closed, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

MAX_HEADER_LINE = 1024
MAX_HEADERS = 16
MAX_BODY = 4 << 20
Message = dict[str, Any]


class WireError(ValueError):
    """The peer sent something that is not a DAP message."""


def _length(f: BinaryIO) -> int | None:
    """The Content-Length of the next message; None at a clean end of stream."""
    length: int | None = None
    for i in range(MAX_HEADERS + 1):
        line = f.readline(MAX_HEADER_LINE + 1)
        if not line:
            if i == 0:
                return None
            raise WireError("the stream ended inside a message's headers")
        if len(line) > MAX_HEADER_LINE:
            raise WireError(f"a header line longer than {MAX_HEADER_LINE} bytes")
        if not line.endswith(b"\n"):
            raise WireError("the stream ended inside a message's headers")
        line = line.strip()
        if not line:
            if length is None:
                raise WireError("a message without Content-Length")
            return length
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            text = value.strip()
            if not text.isdigit() or int(text) > MAX_BODY:
                raise WireError(f"Content-Length {text[:20]!r}: not a number up to {MAX_BODY}")
            length = int(text)
    raise WireError(f"more than {MAX_HEADERS} header lines")


def read_message(f: BinaryIO) -> Message | None:
    """The next message from ``f``; None at a clean end of stream."""
    length = _length(f)
    if length is None:
        return None
    body = f.read(length)
    if len(body) != length:
        raise WireError("the stream ended inside a message's body")
    try:
        msg = json.loads(body)
    except ValueError:
        raise WireError("a body that is not JSON") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise WireError("a body that is not a DAP message (an object with a type)")
    return msg


def encode(msg: Message) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data
