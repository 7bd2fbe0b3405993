"""The registry: the single source of truth about running sessions and ranks.

Layout (schema: ``harness/schema/registry.schema.json``)::

    <root>/<session_id>/session.json
    <root>/<session_id>/rank-<N>.json

Python writes it (atomic temp file + rename, so readers never see half a file);
the CLI and the VS Code extension read it. A ``filelock`` is taken only where
several writers must agree: session creation with its port reservation.
Liveness is ``pid alive and create time equal``, so a reused pid is not live.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import filelock
import psutil

from harness.errors import HarnessError

SCHEMA_VERSION = 1
ENV_DIR = "RTDEBUG_REGISTRY_DIR"
LIVE_RANK_STATES = ("starting", "ready", "attached")
LIVE_SESSION_STATES = ("starting", "running")
SCHEMA_PATH = Path(__file__).with_name("schema") / "registry.schema.json"


def default_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "rtdebug"
    return Path.home() / ".rtdebug" / "registry"


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def process_create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_alive(pid: int, create_time: float) -> bool:
    """True if ``pid`` runs and is the same process (not a reused pid)."""
    ct = process_create_time(pid)
    if ct is None or abs(ct - create_time) > 0.01:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def session_entry(session_id: str, mode: str, **fields: Any) -> dict[str, Any]:
    """A new session entry for this (launcher) process; ``fields`` add the mode-specific parts."""
    now = time.time()
    pid = os.getpid()
    return {
        "schema_version": SCHEMA_VERSION, "kind": "session", "session_id": session_id, "mode": mode,
        "launcher_pid": pid, "launcher_create_time": process_create_time(pid) or now,
        "command": ["rtdebug", *sys.argv[1:]], "cwd": os.getcwd(), "started_at": now, "updated_at": now,
        "ended_at": None, "exit_code": None, "state": "starting", **fields,
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
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION else None


class Registry:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

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

    def lock(self, timeout: float = 30.0) -> filelock.FileLock:
        self.ensure()
        return filelock.FileLock(str(self.root / ".lock"), timeout=timeout)

    # -- sessions -----------------------------------------------------------
    def create_session(self, entry: dict[str, Any]) -> None:
        """Write a new session entry, refusing ports that a live session already holds.

        Held under the registry lock so two launchers starting at the same moment
        can never both get overlapping ports.
        """
        with self.lock():
            self.prune()
            wanted = set(entry["ports"])
            for other in self.sessions():
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
        return read_json(self.session_dir(session_id) / "session.json")

    def update_session(self, session_id: str, **fields: Any) -> None:
        path = self.session_dir(session_id) / "session.json"
        entry = read_json(path)
        if entry is None:
            return
        entry.update(fields, updated_at=time.time())
        write_json_atomic(path, entry)

    def sessions(self) -> Iterator[dict[str, Any]]:
        if not self.root.is_dir():
            return
        for d in sorted(self.root.iterdir()):
            if d.is_dir():
                entry = read_json(d / "session.json")
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
        out = [read_json(p) for p in d.glob("rank-*.json")]
        return sorted((r for r in out if r is not None), key=lambda r: r["rank"])

    # -- liveness -----------------------------------------------------------
    @staticmethod
    def live_rank(entry: dict[str, Any]) -> bool:
        return is_alive(entry["pid"], entry["create_time"])

    def prune(self) -> None:
        """Drop sessions whose launcher is gone and live-looking ranks whose process is gone."""
        for s in list(self.sessions()):
            sid = s["session_id"]
            if not is_alive(s["launcher_pid"], s["launcher_create_time"]):
                shutil.rmtree(self.session_dir(sid), ignore_errors=True)
                continue
            for r in self.ranks(sid):
                if r["state"] in LIVE_RANK_STATES and not is_alive(r["pid"], r["create_time"]):
                    try:
                        self.rank_path(sid, r["rank"]).unlink()
                    except OSError:
                        pass

    def live(self) -> list[dict[str, Any]]:
        """Live sessions, each with its ``ranks`` list, after pruning stale entries."""
        self.prune()
        out = []
        for s in self.sessions():
            s = dict(s, ranks=self.ranks(s["session_id"]))
            out.append(s)
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

