"""Who owns one TCP socket on this host, asked of the kernel for exactly its 4-tuple (``inet_diag`` netlink).

``ss`` asks the same way: a ``SOCK_DIAG_BY_FAMILY`` request without ``NLM_F_DUMP`` names one socket by
(local address, local port, remote address, remote port) and the kernel answers with that socket only
(its state, uid and inode) or ``ENOENT``. One request and one reply of ~100 bytes, whatever the number
of sockets on the host: reading ``/proc/net/tcp{,6}`` instead costs a line per socket, and a flood of
connections grows those files itself. Unprivileged, and scoped to the caller's network namespace, as
``/proc/net/tcp`` is.

A kernel without ``tcp_diag`` also answers ``ENOENT``. So the first miss is checked against a socket
that must exist (the caller's own end of the same connection); if the kernel cannot find that either,
``Unavailable`` is raised and the caller falls back to ``/proc``.
"""

from __future__ import annotations

import errno
import itertools
import socket
import struct
import threading

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 0x2
NOCOOKIE = 0xFFFFFFFF
TCP_TIME_WAIT, TCP_LISTEN = 6, 10
ALL_STATES = 0xFFFFFFFF

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states
_SOCKID = struct.Struct(">HH16s16s")  # inet_diag_sockid: sport, dport (big-endian), src, dst
_SOCKID_TAIL = struct.Struct("=III")  # if, cookie[2]
_MSG_HEAD = struct.Struct("=BBBB")  # inet_diag_msg: family, state, timer, retrans
_MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_MSG_LEN = _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size + _MSG_TAIL.size

Endpoint = tuple[str, int]


class Unavailable(OSError):
    """The kernel cannot answer socket-diag requests here (no netlink, no ``tcp_diag``): use /proc."""


def _packed(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host.split("%", 1)[0]).ljust(16, b"\0")


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class SockDiag:
    """One netlink socket, opened on first use and kept; safe to share between threads."""

    def __init__(self, timeout: float = 1.0) -> None:
        self.timeout = timeout
        self.verified = False  # the kernel has found a socket for us at least once
        self._sock: socket.socket | None = None
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def _socket(self) -> socket.socket:
        if self._sock is None:
            af_netlink = getattr(socket, "AF_NETLINK", None)
            if af_netlink is None:
                raise Unavailable(errno.EAFNOSUPPORT, "no netlink on this platform")
            s = socket.socket(af_netlink, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
            s.settimeout(self.timeout)
            self._sock = s
        return self._sock

    def lookup(self, local: Endpoint, remote: Endpoint) -> tuple[int, int, int] | None:
        """(state, uid, inode) of the TCP socket bound to ``local`` and connected to ``remote``, else None."""
        family = _family(local[0])
        sockid = _SOCKID.pack(local[1], remote[1], _packed(family, local[0]), _packed(family, remote[0]))
        body = _REQ_V2.pack(family, socket.IPPROTO_TCP, 0, 0, ALL_STATES) + sockid
        body += _SOCKID_TAIL.pack(0, NOCOOKIE, NOCOOKIE)
        with self._lock:
            seq = next(self._seq)
            s = self._socket()
            s.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, 0) + body)
            while True:  # a reply to an earlier request that timed out is skipped by its sequence number
                reply = s.recv(8192)
                if len(reply) >= _NLMSGHDR.size and _NLMSGHDR.unpack_from(reply)[3] == seq:
                    break
        return _decode(reply, local[1], remote[1])

    def owner_uid(self, ours: Endpoint, peer: Endpoint) -> int | None:
        """uid of the open socket at ``peer`` connected to ``ours`` (our accepted socket), else None.

        Only a full, open socket counts: not a listener, not TIME_WAIT, not one whose file is closed
        (inode 0, e.g. a peer that connected and closed before we looked).
        """
        found = self.lookup(peer, ours)
        if found is None:
            if not self.verified and self.lookup(ours, peer) is None:
                raise Unavailable(errno.ENOENT, "socket-diag finds no sockets here (no tcp_diag?)")
            self.verified = True
            return None
        self.verified = True
        state, uid, inode = found
        if state in (TCP_TIME_WAIT, TCP_LISTEN) or inode == 0:
            return None
        return uid

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _decode(reply: bytes, local_port: int, remote_port: int) -> tuple[int, int, int] | None:
    """The one socket in a reply, None for ENOENT; another error raises ``Unavailable``."""
    _, kind, _, _, _ = _NLMSGHDR.unpack_from(reply)
    if kind == NLMSG_ERROR:
        code = -struct.unpack_from("=i", reply, _NLMSGHDR.size)[0]
        if code == errno.ENOENT:
            return None
        raise Unavailable(code, f"socket-diag: {errno.errorcode.get(code, code)}")
    if kind != SOCK_DIAG_BY_FAMILY or len(reply) < _NLMSGHDR.size + _MSG_LEN:
        raise Unavailable(errno.EPROTO, f"socket-diag: unexpected reply type {kind}")
    at = _NLMSGHDR.size
    _, state, _, _ = _MSG_HEAD.unpack_from(reply, at)
    sport, dport, _, _ = _SOCKID.unpack_from(reply, at + _MSG_HEAD.size)
    _, _, _, uid, inode = _MSG_TAIL.unpack_from(reply, at + _MSG_LEN - _MSG_TAIL.size)
    if (sport, dport) != (local_port, remote_port):  # e.g. a listener on that port: not the socket asked for
        return None
    return state, uid, inode


_shared: SockDiag | None = None
_shared_lock = threading.Lock()


def shared() -> SockDiag:
    """The process's one ``SockDiag`` (a netlink socket is opened only when the first peer is checked)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SockDiag()
        return _shared
