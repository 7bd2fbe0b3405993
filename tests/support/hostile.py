"""What a hostile peer sends a rank's debug port, and ``send`` to read what comes back; ``flood``: another
uid's connects by the thousand (the hostile tests and ``bench/probes/refusal_bench.py`` share it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap


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


# Another uid flooding a port: the hostile tests and bench/probes/refusal_bench.py share it.
NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
FOREIGN_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TICK = os.sysconf("SC_CLK_TCK")

FLOOD = textwrap.dedent("""
    import json, os, selectors, socket, sys, time
    port, n, inflight = map(int, sys.argv[1:4])
    sel = selectors.DefaultSelector()
    started = done = replied = 0
    t0 = time.monotonic()
    while done < n:
        while started < n and started - done < inflight:
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            sel.register(s, selectors.EVENT_READ)
            started += 1
        events = sel.select(timeout=30)
        if not events:
            break
        for key, _ in events:
            try:
                replied += bool(key.fileobj.recv(100))
            except OSError:
                pass
            sel.unregister(key.fileobj)
            key.fileobj.close()
            done += 1
    print(json.dumps({"uid": os.getuid(), "done": done, "replied": replied, "seconds": time.monotonic() - t0}))
""")


def flood(port: int, n: int, inflight: int = 32, prefix: list[str] | None = None) -> dict:
    """``n`` connects to ``port`` as another uid; {"uid", "done", "replied", "seconds"}."""
    argv = [*(SETPRIV if prefix is None else prefix), *flood_argv(port, n, inflight)[len(SETPRIV) :]]
    r = subprocess.run(argv, cwd="/", capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"flood failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``, all its threads (also those that ended), in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def flood_argv(port: int, n: int, inflight: int) -> list[str]:
    return [*SETPRIV, FOREIGN_PY, "-c", FLOOD, str(port), str(n), str(inflight)]
