"""Who may talk to a rank's debug port: the owner's uid on this host, an allow-list beyond it.

A debug endpoint runs any code a client sends, as the rank's owner. So the accept
thread decides every connection before a byte reaches debugpy:

* a peer whose socket is on this host (its 4-tuple is a row of our
  ``/proc/net/tcp`` or ``tcp6``) gets in only if that socket belongs to our uid.
  The kernel stamps each socket with its creator's uid; an unprivileged user
  cannot forge it. A row with no inode (the peer already closed; the kernel then
  shows uid 0) does not count as found;
* a peer claiming a loopback address or one of this host's own addresses whose
  socket is not found (closed before we looked) is refused;
* any other peer (another machine or network namespace) gets in only if its
  address is on the allow-list (``--debug-allow``; default: this host's own
  addresses, which lets no other machine in).

The peer's socket is looked up exactly, by its 4-tuple, through the kernel's socket-diag netlink
(``rtdebug.common.sockdiag``: one request, one reply, however many sockets the host has), falling back to a
filtered read of ``/proc/net/tcp{,6}`` where netlink cannot answer. A rank nobody connects to pays nothing.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

from rtdebug.common import sockdiag
from rtdebug.common.addresses import IPAddress, own_addresses, parse_allow
from rtdebug.common.addresses import ip as _ip

Row = tuple[tuple[IPAddress, int], tuple[IPAddress, int], int, int]
PROC_TCP = ("/proc/net/tcp", "/proc/net/tcp6")


def _decode(field: str) -> tuple[IPAddress, int]:
    """``0100007F:1F90`` -> (127.0.0.1, 8080). The kernel prints each 32-bit word in host byte order."""
    hexaddr, hexport = field.split(":")
    raw = b"".join(struct.pack("=I", int(hexaddr[i : i + 8], 16)) for i in range(0, len(hexaddr), 8))
    return _ip(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)), int(hexport, 16)


def tcp_rows(paths: tuple[str, ...] = PROC_TCP, ports: tuple[int, int] | None = None) -> Iterator[Row]:
    """(local, remote, uid, inode) for every TCP socket in this network namespace.

    ``ports=(local, remote)`` skips other rows before decoding them (hosts with many sockets).
    """
    suffixes = None if ports is None else (f":{ports[0]:04X}", f":{ports[1]:04X}")
    for path in paths:
        try:
            with open(path, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for line in lines:
            cols = line.split()
            if suffixes and not (cols[1].endswith(suffixes[0]) and cols[2].endswith(suffixes[1])):
                continue
            yield _decode(cols[1]), _decode(cols[2]), int(cols[7]), int(cols[9])


_diag_broken = False  # netlink cannot answer in this process: /proc from now on


def peer_uid(ours: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """uid owning the open socket at ``peer`` connected to ``ours`` on this host, else None."""
    global _diag_broken
    if not _diag_broken:
        try:
            return sockdiag.shared().owner_uid(ours, peer)
        except sockdiag.Unavailable:
            _diag_broken = True
        except OSError:  # e.g. no reply in time: this once, ask /proc
            pass
    return proc_peer_uid(ours, peer)


def proc_peer_uid(ours: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """``peer_uid`` from ``/proc/net/tcp{,6}``, only the rows with the two ports decoded; the peer's own
    family's file first (each read walks the kernel's whole socket table: ~1 ms, so one if it can)."""
    want_local = (_ip(peer[0]), peer[1])
    want_remote = (_ip(ours[0]), ours[1])
    paths = PROC_TCP if want_local[0].version == 4 else PROC_TCP[::-1]
    for path in paths:
        for local, remote, uid, inode in tcp_rows((path,), ports=(peer[1], ours[1])):
            if local == want_local and remote == want_remote and inode != 0:
                return uid
    return None


_own: tuple[float, set[IPAddress]] = (-1.0, set())


def own_addresses_now(max_age: float = 1.0) -> set[IPAddress]:
    """This host's addresses, listed at most once per ``max_age`` s (a flood from afar must not re-list them)."""
    global _own
    now = time.monotonic()
    if _own[0] < 0 or now - _own[0] > max_age:
        _own = (now, own_addresses())
    return _own[1]


class AllowList:
    """Remote peers that may connect; empty spec = this host's own addresses (looked up per check)."""

    def __init__(self, spec: str = "") -> None:
        self.spec = spec
        self.networks = parse_allow(spec)

    def allows(self, addr: IPAddress) -> bool:
        if not self.networks:
            return addr in own_addresses_now()
        return any(addr.version == n.version and addr in n for n in self.networks)


@dataclass
class Peer:
    """Who connected (``addr``, socket owner ``uid``) and, if refused, why (``reason``; "" = admitted)."""

    addr: str
    uid: int | None
    reason: str
    dropped: str = ""  # set by the endpoint when it drops this half-open connection for a newer one

    @property
    def line(self) -> str:
        who = "uid unknown" if self.uid is None else f"uid {self.uid}"
        return f"refused debug connection from {self.addr} ({who}): {self.reason}"


def check(conn: socket.socket, allow: AllowList, owner: int | None = None) -> Peer | None:
    """None if ``conn`` (just accepted) may reach the debugger, else the refused peer (``reason``). Fails closed."""
    peer = judge(conn, allow, owner)
    return peer if peer.reason else None


def judge(conn: socket.socket, allow: AllowList, owner: int | None = None) -> Peer:
    """The peer of ``conn`` and why it is refused (``reason`` "" if admitted). Fails closed."""
    owner = os.geteuid() if owner is None else owner
    try:
        peer = conn.getpeername()[:2]
        ours = conn.getsockname()[:2]
    except OSError as exc:
        return Peer("?", None, f"peer vanished ({exc.strerror})")
    text = f"{peer[0]}:{peer[1]}"
    try:
        uid = peer_uid(ours, peer)
        addr = _ip(peer[0])
        if uid is not None:
            why = "" if uid == owner else f"its socket belongs to another user (not uid {owner})"
            return Peer(text, uid, why)
        if addr.is_loopback or addr in own_addresses_now():
            return Peer(text, None, "a local peer whose socket could not be found (closed before the check?)")
        if not allow.allows(addr):
            rule = allow.spec or "this host's own addresses"
            return Peer(text, None, f"not on the debug allow-list ({rule})")
    except (OSError, ValueError, IndexError) as exc:
        return Peer(text, None, f"could not check the peer: {exc}")
    return Peer(text, None, "")
