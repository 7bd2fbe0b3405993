"""Entries in a cluster store (a job's c10d store, a Ray cluster's GCS KV) are signed, so a reader can tell
an entry its own job wrote from one anybody who reaches the store wrote.

A per-job secret: the launcher makes a random one (or takes the user's, ``RTDEBUG_JOB_SECRET`` or the
owner-only file named by ``RTDEBUG_JOB_SECRET_FILE``, which every node of a multi-node job needs to share),
keeps it owner-only in its session directory (``job.secret``) and hands it to the ranks in their
environment (Ray workers: inside the pickled callback). Every entry published carries ``mac``, an
HMAC-SHA256 over the store key and the entry's canonical JSON, so an entry cannot be moved to another key
(another rank, another job) either. A reader knows the user's secret (environment, file) and those of this
machine's live sessions; an entry whose MAC none of them matches is *unverified*: shown as such, never
chosen by default (``rtdebug.views``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError

ENV_SECRET = "RTDEBUG_JOB_SECRET"
ENV_SECRET_FILE = "RTDEBUG_JOB_SECRET_FILE"
SECRET_FILE = "job.secret"
MAC = "mac"
MIN_LEN = 16
_DOMAIN = b"rtdebug-entry-v1\0"


def _owner_only(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def supplied_secret(env: Mapping[str, str] | None = None) -> str | None:
    """The user's job secret (``RTDEBUG_JOB_SECRET``, else the file ``RTDEBUG_JOB_SECRET_FILE``), or None."""
    env = os.environ if env is None else env
    value, source = env.get(ENV_SECRET, ""), ENV_SECRET
    path = env.get(ENV_SECRET_FILE, "")
    if not value and path:
        source = f"{ENV_SECRET_FILE} {path}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise HarnessError(f"cannot read the job secret file {path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            if not _owner_only(os.fstat(f.fileno())):
                raise HarnessError(f"job secret file {path} must be a file of yours, mode 0600 (chmod 600 {path})")
            value = f.read().decode(errors="replace").strip()
    if not value:
        return None
    if len(value) < MIN_LEN:
        raise HarnessError(f"{source}: a job secret needs at least {MIN_LEN} characters (e.g. `openssl rand -hex 32`)")
    return value


def new_secret() -> str:
    return secrets.token_hex(32)


def read_secret(session_dir: Path) -> str | None:
    """The secret kept in a session directory; None if absent or not owner-only."""
    try:
        fd = os.open(session_dir / SECRET_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not _owner_only(os.fstat(f.fileno())):
            return None
        value = f.read().decode(errors="replace").strip()
    return value if len(value) >= MIN_LEN else None


def ensure_secret(session_dir: Path, supplied: str | None = None) -> str:
    """The session's secret: the one it keeps already, else ``supplied`` or a new one, written 0600."""
    found = read_secret(session_dir)
    if found is not None:
        return found
    value = supplied or new_secret()
    path = session_dir / SECRET_FILE
    tmp = session_dir / f".{SECRET_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.replace(tmp, path)
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
    """What a reader can verify with: the user's secret, and those of the given (live local) sessions."""
    out = []
    supplied = supplied_secret()
    if supplied:
        out.append(supplied)
    for d in session_dirs:
        s = read_secret(d)
        if s and s not in out:
            out.append(s)
    return out
