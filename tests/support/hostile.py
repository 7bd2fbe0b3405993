"""What a hostile peer sends a rank's debug port, and ``send`` to read what comes back."""

from __future__ import annotations

import json
import socket


def browser_post(port: int, marker: str) -> bytes:
    """Firefox's bytes for ``fetch('http://127.0.0.1:PORT/', {method: 'POST', mode: 'no-cors', body})`` from a
    page on https://evil.example, the body a DAP ``evaluate`` that writes ``marker`` (pydevd ran exactly
    this before the gate: it skips to the Content-Length header and runs the body)."""
    body = json.dumps(
        {
            "seq": 1,
            "type": "request",
            "command": "evaluate",
            "arguments": {"expression": f"open({marker!r}, 'w').write('pwned')", "context": "repl"},
        },
        separators=(",", ":"),
    ).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\r\n"
        "Accept: */*\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n"
        f"Content-Type: text/plain;charset=UTF-8\r\nContent-Length: {len(body)}\r\n"
        "Origin: https://evil.example\r\nConnection: keep-alive\r\nReferer: https://evil.example/\r\n"
        "Sec-Fetch-Dest: empty\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Site: cross-site\r\nPriority: u=4\r\n\r\n"
    )
    return head.encode() + body


def send(port: int, data: bytes) -> bytes:
    """``data`` to the port, then whatever comes back until the rank closes (b"" if it resets)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except OSError:
            pass
        return got
