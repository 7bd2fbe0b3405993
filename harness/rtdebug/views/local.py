"""The local view: sessions started on this machine, from its registry files (always asked first).

The files are the owner's alone (``Registry.check_root``), so their entries are ``verified``."""

from __future__ import annotations

from pathlib import Path

from rtdebug.registry import collseq
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import live_sessions
from rtdebug.registry.schema import CollectiveRecord, ListedSession, RankEntry, SessionEntry
from rtdebug.views.teardown import stop_local_session


def _collective(sdir: Path, r: RankEntry) -> CollectiveRecord | None:
    if "tunnel" in r:
        return r.get("collective") if collseq.plausible(r.get("collective")) else None
    return collseq.read_entry(sdir, r)


class LocalView:
    """This machine's registry files (sessions started here)."""

    label = "local"

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or Registry()

    def _mark(self, session: SessionEntry, ranks: list[RankEntry]) -> ListedSession:
        sdir = self.registry.session_dir(str(session["session_id"]))
        # each rank's last collective, read from its record file (it is never signalled for it); a connected
        # rank's as its node said it (``rtdebug.connect.listing`` checked it), its file being there
        ranks = [{**r, "verified": True, "collective": _collective(sdir, r)} for r in ranks]
        return {**session, "ranks": ranks, "source": self.label, "verified": True}

    def sessions(self) -> list[ListedSession]:
        return [self._mark(s, s.get("ranks", [])) for s in live_sessions(self.registry)]

    def session(self, session_id: str) -> ListedSession | None:
        entry = self.registry.read_session(session_id)
        if entry is None:
            return None
        return self._mark(entry, self.registry.ranks(session_id))

    def stop(self, session: SessionEntry) -> str:
        return stop_local_session(self.registry, session)
