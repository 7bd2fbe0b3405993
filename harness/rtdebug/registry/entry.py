"""One registry entry: its schema, how it is written whole and read safely, and the fields every reader needs.

Shared by every store the record lives in: this machine's files (``rtdebug.registry.files``), a
job's c10d store (``rtdebug.registry.c10d``) and a Ray cluster's GCS KV (``rtdebug.registry.ray_kv``).
The JSON Schema ``registry.schema.json`` beside this file is the contract the Python and the VS Code
extension test suites both validate against.

A damaged entry (empty, truncated, garbage, wrong shape) raises ``Unreadable``, never anything a
reader would have to guess at: ``read_json`` checks the schema version and the type of every field
readers index without checking.
Their types (``SessionEntry``, ``RankEntry``) are in ``rtdebug.registry.schema``; ``checked`` is the one place a
value read from a file or a store becomes one, so readers take typed entries and trust the ``REQUIRED`` fields
(any other field they read with ``.get`` and check: an entry is anyone's who reaches its store).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeVar, cast, overload

from rtdebug.common import atomic
from rtdebug.common.procinfo import process_create_time
from rtdebug.registry.schema import RankEntry, SessionEntry

SCHEMA_VERSION: Final = 1
LIVE_RANK_STATES = ("starting", "ready", "attached")
ATTACHABLE_STATES = ("ready", "attached")  # a client can connect (starting: the endpoint is not up yet)
LIVE_SESSION_STATES = ("starting", "running")
_NUM: tuple[type, ...] = (int, float)
# The fields readers index without checking; an entry lacking one is "unreadable", not a crash.
REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "session": {
        "session_id": str,
        "mode": str,
        "launcher_pid": int,
        "launcher_create_time": _NUM,
        "state": str,
        "host": str,
        "ports": list,
        "started_at": _NUM,
        "script": str,
    },
    "rank": {
        "session_id": str,
        "rank": int,
        "pid": int,
        "create_time": _NUM,
        "state": str,
        "host": str,
        "port": int,
        "world_size": int,
        "local_rank": int,
    },
}


class RankWriter(Protocol):
    """Where a rank records its entry: this machine's files (``Registry``) or a cluster store."""

    def write_rank(self, entry: dict[str, Any]) -> None: ...


class Unreadable(ValueError):
    """A registry file exists but is not a valid entry (empty, truncated, garbage, wrong shape)."""


SCHEMA_PATH = Path(__file__).with_name("registry.schema.json")


# One pattern for every session id, wherever it comes from (a directory name, a flag, a store entry):
# no "/", no leading dot, no "..", so an id can name a directory under the registry root and nothing else.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def valid_session_id(value: object) -> bool:
    return isinstance(value, str) and SESSION_ID.fullmatch(value) is not None and ".." not in value


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def session_entry(session_id: str, mode: str, **fields: Any) -> dict[str, Any]:
    """A new session entry for this (launcher) process; ``fields`` add the mode-specific parts."""
    now = time.time()
    pid = os.getpid()
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "session",
        "session_id": session_id,
        "mode": mode,
        "launcher_pid": pid,
        "launcher_create_time": process_create_time(pid) or now,
        "command": ["rtdebug", *sys.argv[1:]],
        "cwd": os.getcwd(),
        "started_at": now,
        "updated_at": now,
        "ended_at": None,
        "exit_code": None,
        "state": "starting",
        **fields,
    }


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    atomic.write(path, json.dumps(data, indent=1, sort_keys=True).encode())


def problem(data: Any, kind: str | None = None) -> str | None:
    """Why ``data`` is not a schema entry (of ``kind``, when given) that readers can index safely; None if it is.

    Every store's reader checks this before using an entry: a file, a c10d store key or a Ray KV value
    may have been written by anyone who can reach that store."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return f"not an rtdebug schema-{SCHEMA_VERSION} entry"
    actual = data.get("kind")
    if kind is not None and actual != kind:
        return f"not a {kind} entry"
    for key, typ in REQUIRED.get(actual if isinstance(actual, str) else "", {"kind": str}).items():
        value = data.get(key)
        if not isinstance(value, typ) or isinstance(value, bool):
            return f"field {key!r} missing or of the wrong type"
    if "session_id" in data and not valid_session_id(data["session_id"]):
        return f"session id {str(data['session_id'])[:80]!r} is not a valid session id"
    return None


MAX_ENTRY = 1 << 20  # bytes: a rank or session entry is a few KB


def read_bounded(path: Path, limit: int = MAX_ENTRY) -> bytes | None:
    """The bytes of the regular file at ``path`` (None: no file); ``Unreadable`` for a symlink, a FIFO or
    device (opened without following links and without blocking: a FIFO named like an entry would hang
    ``ps`` and the extension), or a file over ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise Unreadable(f"{path}: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{path}: not a regular file")
        if st.st_size > limit:
            raise Unreadable(f"{path}: {st.st_size} bytes, more than an entry ever is ({limit})")
        raw = os.read(fd, limit + 1)
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise Unreadable(f"{path}: more than {limit} bytes")
    return raw


@overload
def checked(data: object, kind: Literal["session"]) -> SessionEntry: ...
@overload
def checked(data: object, kind: Literal["rank"]) -> RankEntry: ...
def checked(data: object, kind: Literal["session", "rank"]) -> SessionEntry | RankEntry:
    """``data`` (JSON from a file or a store: anyone's) as an entry of ``kind``, or ``Unreadable`` saying why
    not: the one place an untrusted value becomes a typed entry, whose ``REQUIRED`` fields readers then trust."""
    why = problem(data, kind)
    if why is not None:
        raise Unreadable(why)
    return cast("SessionEntry | RankEntry", data)


E = TypeVar("E", SessionEntry, RankEntry)


def without(entry: E, keys: Collection[str]) -> E:
    """``entry`` less ``keys``, its order kept: the fields a store adds beyond the schema (a heartbeat, a MAC),
    which are never a schema field's (a schema field is never removed)."""
    return cast(E, {k: v for k, v in entry.items() if k not in keys})


@overload
def read_json(path: Path, kind: Literal["session"]) -> SessionEntry | None: ...
@overload
def read_json(path: Path, kind: Literal["rank"]) -> RankEntry | None: ...
def read_json(path: Path, kind: Literal["session", "rank"]) -> SessionEntry | RankEntry | None:
    """The entry of ``kind`` at ``path``; None if there is no file; ``Unreadable`` if it is not a valid entry."""
    raw = read_bounded(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        raise Unreadable(f"{path}: {'empty file' if not raw.strip() else 'not valid JSON'}") from None
    try:
        return checked(data, kind)
    except Unreadable as exc:
        raise Unreadable(f"{path}: {exc}") from None
