"""The registry: the single source of truth about running sessions and ranks.

Layout (schema: ``harness/schema/registry.schema.json``)::

    <root>/<session_id>/session.json
    <root>/<session_id>/rank-<N>.json

Python writes it (atomic temp file + rename, so readers never see half a file);
the CLI and the VS Code extension read it. A file lock is taken only where
several writers must agree: session creation with its port reservation.
Liveness is ``pid alive and create time equal``, so a reused pid is not live;
what a dead or orphaned entry becomes is decided in ``harness.liveness``.

A damaged entry (empty, truncated, garbage, wrong shape) never crashes a reader:
it is skipped and its path collected in ``Registry.unreadable`` so that ``ps``
can name it and ``attach`` can say that rank's entry is unreadable.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from harness.errors import HarnessError
from harness.filelocks import locked
from harness.procinfo import is_alive, process_create_time

SCHEMA_VERSION = 1
ENV_DIR = "RTDEBUG_REGISTRY_DIR"
LIVE_RANK_STATES = ("starting", "ready", "attached")
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


SCHEMA_PATH = Path(__file__).with_name("schema") / "registry.schema.json"


def default_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "rtdebug"
    return Path.home() / ".rtdebug" / "registry"


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


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The entry at ``path``; None if there is no file; ``Unreadable`` if it is not a valid entry."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise Unreadable(f"{path}: {'empty file' if not raw.strip() else 'not valid JSON'}") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise Unreadable(f"{path}: not an rtdebug schema-{SCHEMA_VERSION} entry")
    kind = data.get("kind")
    for key, typ in REQUIRED.get(kind if isinstance(kind, str) else "", {"kind": str}).items():
        value = data.get(key)
        if not isinstance(value, typ) or isinstance(value, bool):
            raise Unreadable(f"{path}: field {key!r} missing or of the wrong type")
    return data


class Registry:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.unreadable: dict[Path, str] = {}  # path -> why, collected by every read

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            entry = read_json(path)
        except Unreadable as exc:
            self.unreadable[path] = str(exc)
            return None
        self.unreadable.pop(path, None)
        return entry

    # -- layout -------------------------------------------------------------
    def ensure(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            os.chmod(self.root, 0o700)
        except OSError:
            pass
        return self.root

    def session_dir(self, session_id: str) -> Path:
        return self.root / session_id

    def lock(self, timeout: float = 30.0) -> AbstractContextManager[None]:
        self.ensure()
        return locked(self.root / ".lock", timeout)

    # -- sessions -----------------------------------------------------------
    def create_session(self, entry: dict[str, Any]) -> None:
        """Write a new session entry, refusing ports that a live session already holds.

        Held under the registry lock so two launchers starting at the same moment
        can never both get overlapping ports.
        """
        from harness.liveness import prune

        with self.lock():
            active = prune(self)
            wanted = set(entry["ports"])
            for other in active:
                if other["host"] != entry["host"] and "0.0.0.0" not in (other["host"], entry["host"]):
                    continue
                clash = sorted(wanted & set(other["ports"]))
                if clash:
                    raise HarnessError(
                        f"debug port {clash[0]} is reserved by session {other['session_id']} "
                        f"(pid {other['launcher_pid']}); pick another range with --debug-port-base"
                    )
            d = self.session_dir(entry["session_id"])
            d.mkdir(mode=0o700)
            write_json_atomic(d / "session.json", entry)

    def read_session(self, session_id: str) -> dict[str, Any] | None:
        return self._read(self.session_dir(session_id) / "session.json")

    def update_session(self, session_id: str, **fields: Any) -> None:
        path = self.session_dir(session_id) / "session.json"
        entry = self._read(path)
        if entry is None:
            return
        entry.update(fields, updated_at=time.time())
        write_json_atomic(path, entry)

    def sessions(self) -> Iterator[dict[str, Any]]:
        if not self.root.is_dir():
            return
        for d in sorted(self.root.iterdir()):
            if d.is_dir() and not d.name.startswith("."):
                entry = self._read(d / "session.json")
                if entry is not None:
                    yield entry

    # -- ranks --------------------------------------------------------------
    def rank_path(self, session_id: str, rank: int) -> Path:
        return self.session_dir(session_id) / f"rank-{rank}.json"

    def write_rank(self, entry: dict[str, Any]) -> None:
        d = self.session_dir(entry["session_id"])
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(self.rank_path(entry["session_id"], entry["rank"]), entry)

    def ranks(self, session_id: str) -> list[dict[str, Any]]:
        d = self.session_dir(session_id)
        if not d.is_dir():
            return []
        out = [self._read(p) for p in d.glob("rank-*.json")]
        return sorted((r for r in out if r is not None), key=lambda r: r["rank"])

    def rank_unreadable(self, session_id: str, rank: int) -> str | None:
        """Why rank ``rank``'s entry cannot be read, or None if it is fine or absent."""
        path = self.rank_path(session_id, rank)
        self._read(path)
        return self.unreadable.get(path)

    # -- liveness (decisions in harness.liveness) ---------------------------
    @staticmethod
    def live_rank(entry: dict[str, Any]) -> bool:
        return is_alive(entry["pid"], entry["create_time"])

    def prune(self) -> list[dict[str, Any]]:
        from harness.liveness import prune

        return prune(self)

    def live(self) -> list[dict[str, Any]]:
        """Sessions with a live launcher or live processes (orphaned), each with its ``ranks``."""
        out = []
        for s in self.prune():
            out.append(dict(s, ranks=self.ranks(s["session_id"])))
        return out

    def find_session(self, session_id: str | None) -> dict[str, Any]:
        """The named live session, or the newest one; a one-line error if there is none."""
        live = self.live()
        if session_id is not None:
            for s in live:
                if s["session_id"] == session_id:
                    return s
            raise HarnessError(f"no live session {session_id!r}; see `rtdebug ps`")
        if not live:
            raise HarnessError("no live rtdebug session; start one with `rtdebug torchrun` or `rtdebug run`")
        return max(live, key=lambda s: s["started_at"])
