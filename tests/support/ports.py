"""Free local ports, for everything that drives jobs from outside (tests, bench, the GPU check, the extension's
e2e hosts). rtdebug's own runtime code keeps its own helpers in ``rtdebug.common.ports``."""

from __future__ import annotations

import random
import socket


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``host`` now (TIME_WAIT is not "bound")."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """One port the kernel says is free on ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_base(n: int = 16, lo: int = 20000, hi: int = 40000, host: str = "127.0.0.1") -> int:
    """A random base in [lo, hi) with ``n`` free ports after it, away from the default 5678 that a developer
    may use and from torchrun's 29500 only by chance."""
    for _ in range(200):
        base = random.randrange(lo, hi - n)
        if all(port_free(base + i, host) for i in range(n)):
            return base
    raise RuntimeError("no free port range")


class PortRanges:
    """Port ranges handed out in turn from ``lo`` to ``hi`` (then from ``lo`` again), each free when handed out
    and never one this allocator handed out before in this round: for a driver that starts many jobs."""

    def __init__(self, lo: int, hi: int, gap: int = 0, host: str = "127.0.0.1") -> None:
        self.lo, self.hi, self.gap, self.host = lo, hi, gap, host
        self.next = lo
        self.used: set[int] = set()

    def take(self, n: int) -> int:
        for _ in range(2):
            while self.next + n <= self.hi:
                span = range(self.next, self.next + n)
                self.next += n + self.gap
                if not self.used.intersection(span) and all(port_free(p, self.host) for p in span):
                    self.used.update(span)
                    return span.start
            self.next, self.used = self.lo, set()
        raise RuntimeError(f"no {n} free ports in {self.lo}-{self.hi}")
