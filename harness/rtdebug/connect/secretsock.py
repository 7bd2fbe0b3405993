"""The job secret, kept in this process's memory and handed to this user's own rtdebug commands only.

``connect`` reads the job's secret over ssh and never writes it here. ``rtdebug stacks`` on this machine must
sign its request with it, so ``connect`` listens on a unix socket in its (owner-only) session directory,
``secret.sock``; ``rtdebug.registry.signing.read_secret`` asks it there. Each caller's uid is checked
(``SO_PEERCRED``): only this user's processes get an answer. Bound through ``/proc/self/fd`` so a long
registry path never exceeds a socket address's 108 bytes.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from pathlib import Path

from rtdebug.registry.signing import SECRET_SOCKET


def private_socket(session_dir: Path, name: str) -> socket.socket:
    """A listening unix socket ``name`` in ``session_dir``, mode 0600, bound through ``/proc/self/fd`` (a long
    registry path never exceeds a socket address's 108 bytes); ``connect``'s relay uses it too."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(f"/proc/self/fd/{fd}/{name}")
        finally:
            os.umask(old)
    finally:
        os.close(fd)
    sock.listen(16)
    return sock


class SecretServer:
    def __init__(self, session_dir: Path, secret: str) -> None:
        self.path = session_dir / SECRET_SOCKET
        self._secret = secret.encode()
        self._sock = private_socket(session_dir, SECRET_SOCKET)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="rtdebug-connect-secret", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        me = os.geteuid()
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                try:
                    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                    _pid, uid, _gid = struct.unpack("3i", creds)
                    if uid == me:
                        conn.settimeout(2)
                        conn.sendall(self._secret)
                except OSError:
                    continue

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
