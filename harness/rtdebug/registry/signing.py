"""Entries in a cluster store (a job's c10d store, a Ray cluster's GCS KV) are signed, so a reader can tell
an entry its own job wrote from one anybody who reaches the store wrote.

A per-job secret: the launcher takes the user's (``RTDEBUG_JOB_SECRET`` or the owner-only file named by
``RTDEBUG_JOB_SECRET_FILE``), else the per-user default secret (``default_secret``: one owner-only file
under the user's config directory, made once), keeps it owner-only in its session directory
(``job.secret``) and hands it to the ranks in their environment (Ray workers: inside the pickled
callback). Why a per-user default, not a random secret per job: every node of a multi-node job must hold
the same one, or the other nodes' entries are unverified and their ranks ignore a job-wide ``stacks``
request from this node; on a cluster with a shared home every node reads the same file, with no setup.
Every entry published carries ``mac``, an HMAC-SHA256 over the store key and the entry's canonical JSON,
so an entry cannot be moved to another key (another rank, another job) either. A reader knows the user's
secret (environment, file), the per-user default and those of this machine's live sessions; an entry
whose MAC none of them matches is *unverified*: shown as such, never
chosen by default (``rtdebug.views``).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rtdebug.common import atomic
from rtdebug.common.errors import HarnessError

ENV_SECRET = "RTDEBUG_JOB_SECRET"
ENV_SECRET_FILE = "RTDEBUG_JOB_SECRET_FILE"
SECRET_FILE = "job.secret"
SECRET_SOCKET = "secret.sock"  # rtdebug connect: the secret is in its memory only (rtdebug.connect.secretsock)
MAX_FILE = 4096  # a secret file is read this far at most
MAC = "mac"
MIN_LEN = 16
_DOMAIN = b"rtdebug-entry-v1\0"


def _owner_only(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _read_owned(path: str | Path) -> str | None:
    """The text of ``path`` if it is a regular file of the user's that nobody else may read, else None.
    Checked on the descriptor, before a byte is read; opened without following a link or blocking on a
    FIFO. ``OSError`` when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not _owner_only(os.fstat(fd)):
            return None
        return os.read(fd, MAX_FILE).decode(errors="replace").strip()
    finally:
        os.close(fd)


def supplied_secret(env: Mapping[str, str] | None = None) -> str | None:
    """The user's job secret (``RTDEBUG_JOB_SECRET``, else the file ``RTDEBUG_JOB_SECRET_FILE``), or None."""
    env = os.environ if env is None else env
    value, source = env.get(ENV_SECRET, ""), ENV_SECRET
    path = env.get(ENV_SECRET_FILE, "")
    if not value and path:
        source = f"{ENV_SECRET_FILE} {path}"
        try:
            found = _read_owned(path)
        except OSError as exc:
            raise HarnessError(f"cannot read the job secret file {path}: {exc.strerror}") from None
        if found is None:
            raise HarnessError(f"job secret file {path} must be a file of yours, mode 0600 (chmod 600 {path})")
        value = found
    if not value:
        return None
    if len(value) < MIN_LEN:
        raise HarnessError(f"{source}: a job secret needs at least {MIN_LEN} characters (e.g. `openssl rand -hex 32`)")
    return value


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/rtdebug``, else ``~/.config/rtdebug`` (an empty or relative XDG value is unset)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or os.path.expanduser("~")) / ".config"
    return base / "rtdebug"


def shown(path: Path, env: Mapping[str, str] | None = None) -> str:
    """``path`` with the home directory as ``~`` (what a user types on another node)."""
    home = (os.environ if env is None else env).get("HOME") or os.path.expanduser("~")
    rel = os.path.relpath(path, home) if home else ".."
    return path.as_posix() if rel.startswith("..") else f"~/{rel}"


def default_secret(create: bool = False, env: Mapping[str, str] | None = None) -> str | None:
    """The per-user default secret (``config_dir()/job.secret``); None when absent (and not ``create``d, or
    the directory cannot be written: the caller then falls back to a random per-job secret). A file that is
    not a regular file of the user's, or that group or others may read, is refused (``HarnessError``):
    whoever could read or swap it could sign as the user."""
    path = config_dir(env) / SECRET_FILE
    value = _read_default(path, env)
    if value is not None or not create:
        return value
    try:
        _create_default(path)
    except OSError:
        return None
    return _read_default(path, env)


def _read_default(path: Path, env: Mapping[str, str] | None) -> str | None:
    name = shown(path, env)
    try:
        value = _read_owned(path)
    except (FileNotFoundError, NotADirectoryError):  # none there (a directory above it is missing or a file)
        return None
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise HarnessError(f"refused the default job secret {name}: {why} (remove it to make a new one)") from None
    if value is None:
        raise HarnessError(f"refused the default job secret {name}: not a file of yours, mode 0600 (chmod 600 {name})")
    if len(value) < MIN_LEN:
        raise HarnessError(f"refused the default job secret {name}: shorter than {MIN_LEN} characters (remove it)")
    return value


def _create_default(path: Path) -> None:
    """Written whole to a private temp file (O_EXCL|O_NOFOLLOW, 0600), then linked to its name: a reader never
    sees half a secret, and of several nodes starting at once on a shared home the first link wins (a link
    never replaces a name) and every node reads the winner's."""
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path.parent, 0o700)
    except FileExistsError:
        pass
    tmp = path.parent / f".{SECRET_FILE}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(new_secret() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def job_secret(env: Mapping[str, str] | None = None) -> str | None:
    """The secret a launcher gives its job: the user's (``supplied_secret``), else the per-user default,
    made on first use. None only where no default can be made (then a random per-job one)."""
    return supplied_secret(env) or default_secret(create=True, env=env)


def new_secret() -> str:
    return secrets.token_hex(32)


def read_secret(session_dir: Path) -> str | None:
    """The secret kept in a session directory; None if absent or not owner-only."""
    try:
        value = _read_owned(session_dir / SECRET_FILE)
    except FileNotFoundError:
        value = _ask_socket(session_dir)
    except OSError:
        return None
    return value if value is not None and len(value) >= MIN_LEN else None


def _ask_socket(session_dir: Path) -> str | None:
    """A connected session's secret, from its ``connect`` process (a socket of the user's; None otherwise)."""
    import socket
    import struct

    try:
        fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.lstat(f"/proc/self/fd/{fd}/{SECRET_SOCKET}")
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(f"/proc/self/fd/{fd}/{SECRET_SOCKET}")
            uid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != os.getuid():
                return None
            data = b""
            while len(data) <= MAX_FILE and (chunk := s.recv(MAX_FILE)):
                data += chunk
        return data[:MAX_FILE].decode(errors="replace").strip() or None
    except OSError:
        return None
    finally:
        os.close(fd)


def ensure_secret(session_dir: Path, supplied: str | None = None) -> str:
    """The session's secret: the one it keeps already, else ``supplied`` or a new one, written 0600."""
    found = read_secret(session_dir)
    if found is not None:
        return found
    value = supplied or new_secret()
    atomic.write(session_dir / SECRET_FILE, (value + "\n").encode())
    return value


def _canonical(entry: Mapping[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in entry.items() if k != MAC}, sort_keys=True, separators=(",", ":")).encode()


def mac(key: str, entry: Mapping[str, Any], secret: str) -> str:
    msg = _DOMAIN + key.encode() + b"\0" + _canonical(entry)
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def sign(key: str, entry: Mapping[str, Any], secret: str | None) -> dict[str, Any]:
    """``entry`` with its MAC for store key ``key`` (unsigned when there is no secret)."""
    out = {k: v for k, v in entry.items() if k != MAC}
    if secret:
        out[MAC] = mac(key, out, secret)
    return out


def verify(key: str, entry: Mapping[str, Any], known: Iterable[str]) -> bool:
    """True if ``entry`` carries a MAC for ``key`` under one of the ``known`` secrets."""
    got = entry.get(MAC)
    if not isinstance(got, str):
        return False
    return any(hmac.compare_digest(got, mac(key, entry, s)) for s in known)


def known_secrets(session_dirs: Iterable[Path] = ()) -> list[str]:
    """What a reader can verify with: the user's secret, the per-user default (never made by a reader), and
    those of the given (live local) sessions."""
    out: list[str] = []
    for s in (supplied_secret(), default_secret()):
        if s and s not in out:
            out.append(s)
    for d in session_dirs:
        s = read_secret(d)
        if s and s not in out:
            out.append(s)
    return out
