"""The registry: the single source of truth about running sessions and ranks.

Layout (schema: ``rtdebug/registry/registry.schema.json``, entries: ``rtdebug.registry.entry``)::

    <root>/<session_id>/session.json
    <root>/<session_id>/rank-<N>.json

Python writes it (atomic temp file + rename, so readers never see half a file);
the CLI and the VS Code extension read it. A file lock is taken only where
several writers must agree: session creation with its port reservation
(``rtdebug.registry.liveness.reserve_session``). Reading never writes.
Liveness is ``pid alive and create time equal``, so a reused pid is not live;
what a dead or orphaned entry becomes is decided in ``rtdebug.registry.liveness``.

A damaged entry (empty, truncated, garbage, wrong shape) never crashes a reader:
it is skipped and its path collected in ``Registry.unreadable`` so that ``ps``
can name it and ``attach`` can say that rank's entry is unreadable.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, overload

from rtdebug.common.errors import HarnessError
from rtdebug.common.filelocks import locked
from rtdebug.common.procinfo import is_alive
from rtdebug.registry.entry import (
    Unreadable,
    read_json,
    valid_session_id,
    write_json_atomic,
)
from rtdebug.registry.schema import RankEntry, SessionEntry

ENV_DIR = "RTDEBUG_REGISTRY_DIR"


def default_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "rtdebug"
    return Path.home() / ".rtdebug" / "registry"


class Registry:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.unreadable: dict[Path, str] = {}  # path -> why, collected by every read

    @overload
    def _read(self, path: Path, kind: Literal["session"]) -> SessionEntry | None: ...
    @overload
    def _read(self, path: Path, kind: Literal["rank"]) -> RankEntry | None: ...
    def _read(self, path: Path, kind: Literal["session", "rank"]) -> SessionEntry | RankEntry | None:
        try:
            entry = read_json(path, kind)
        except Unreadable as exc:
            self.unreadable[path] = str(exc)
            return None
        self.unreadable.pop(path, None)
        return entry

    # -- layout -------------------------------------------------------------
    def check_root(self) -> None:
        """Refuse a root that is not the owner's alone: whoever owns or can write it owns these sessions.
        Read without following links: a root that is a symlink (even to a directory of the user's, which
        another user could swap between the check and the use) is refused, and so is a symlink on the
        way to it that neither the user nor root owns."""
        me = os.geteuid()
        self._check_path(me)
        st = os.lstat(self.root)
        if stat.S_ISLNK(st.st_mode):
            raise HarnessError(
                f"registry {self.root} is a symbolic link; point {ENV_DIR} at the real directory "
                f"({os.path.realpath(self.root)})"
            )
        if not stat.S_ISDIR(st.st_mode):
            raise HarnessError(f"registry {self.root} is not a directory; point {ENV_DIR} at a directory of your own")
        if st.st_uid != me:
            raise HarnessError(
                f"registry {self.root} belongs to uid {st.st_uid}, not to you (uid {me}); remove it or point "
                f"{ENV_DIR} at a directory of your own"
            )
        if st.st_mode & 0o077:
            mode = oct(stat.S_IMODE(st.st_mode))
            raise HarnessError(f"registry {self.root} is open to other users (mode {mode}); run: chmod 700 {self.root}")

    def _check_path(self, me: int) -> None:
        """No symlink on the way to the root that another user owns (they could point it anywhere)."""
        path = Path(os.path.abspath(self.root))
        for parent in reversed(path.parents):
            try:
                st = os.lstat(parent)
            except OSError:
                return
            if stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
                raise HarnessError(
                    f"registry {self.root}: {parent} is a symbolic link owned by uid {st.st_uid}; point "
                    f"{ENV_DIR} at a directory whose path only you and root control"
                )

    def ensure(self) -> Path:
        """Create the root (0700) if missing; refuse one that is not the owner's alone."""
        if not self.root.exists():
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.check_root()
        return self.root

    def session_dir(self, session_id: str) -> Path:
        """The session's directory; a session id is never anything but one directory name under the root."""
        if not valid_session_id(session_id):
            raise HarnessError(f"invalid session id {str(session_id)[:80]!r}; see `rtdebug ps`", 2)
        return self.root / session_id

    def lock(self, timeout: float = 30.0) -> AbstractContextManager[None]:
        self.ensure()
        return locked(self.root / ".lock", timeout)

    # -- sessions -----------------------------------------------------------
    def write_new_session(self, entry: Mapping[str, Any]) -> None:
        """Create the session's directory and entry (``liveness.reserve_session`` holds the lock)."""
        d = self.session_dir(entry["session_id"])
        d.mkdir(mode=0o700)
        write_json_atomic(d / "session.json", entry)

    def read_session(self, session_id: str) -> SessionEntry | None:
        return self._read(self.session_dir(session_id) / "session.json", "session")

    def update_session(self, session_id: str, **fields: Any) -> None:
        path = self.session_dir(session_id) / "session.json"
        entry = self._read(path, "session")
        if entry is None:
            return
        write_json_atomic(path, {**entry, **fields, "updated_at": time.time()})

    def sessions(self) -> Iterator[SessionEntry]:
        """Every readable session entry. A session's id is its directory's name: an entry that claims
        another id is unreadable, never used (so no entry field becomes a path)."""
        if not self.root.is_dir():
            return
        self.check_root()
        for d in sorted(self.root.iterdir()):
            if d.is_dir() and valid_session_id(d.name):
                entry = self._read(d / "session.json", "session")
                if entry is not None and self._matches(d / "session.json", entry["session_id"] == d.name):
                    yield entry

    def _matches(self, path: Path, same: bool) -> bool:
        """An entry says the session (and rank) its path says (``same``), or it is unreadable."""
        if same:
            return True
        self.unreadable[path] = f"{path}: its session id or rank does not match its path"
        return False

    # -- ranks --------------------------------------------------------------
    def rank_path(self, session_id: str, rank: int) -> Path:
        return self.session_dir(session_id) / f"rank-{rank}.json"

    def write_rank(self, entry: Mapping[str, Any]) -> None:
        d = self.session_dir(entry["session_id"])
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(self.rank_path(entry["session_id"], entry["rank"]), entry)

    def ranks(self, session_id: str) -> list[RankEntry]:
        d = self.session_dir(session_id)
        if not d.is_dir():
            return []
        out = []
        for p in d.glob("rank-*.json"):
            n = p.name[len("rank-") : -len(".json")]
            entry = self._read(p, "rank") if n.isdigit() else None
            if entry is not None and self._matches(p, entry["session_id"] == session_id and entry["rank"] == int(n)):
                out.append(entry)
        return sorted(out, key=lambda r: r["rank"])

    def rank_unreadable(self, session_id: str, rank: int) -> str | None:
        """Why rank ``rank``'s entry cannot be read, or None if it is fine or absent."""
        path = self.rank_path(session_id, rank)
        self._read(path, "rank")
        return self.unreadable.get(path)

    # -- liveness (decisions in rtdebug.registry.liveness) ---------------------
    @staticmethod
    def live_rank(entry: RankEntry) -> bool:
        return is_alive(entry["pid"], entry["create_time"])
