"""Free local ports."""

from __future__ import annotations

import random
import socket


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "bound"
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_base(n: int = 16) -> int:
    """A base with ``n`` free ports after it, away from the default 5678 that a developer may use."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        if all(port_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no free port range")
