"""Process-wide state of rtdebug inside a rank (set by bootstrap, read by the API)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtdebug.rank.allstop import AllStop
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState

endpoint: Endpoint | None = None
record: RankState | None = None  # this rank's registry entry (its --stop-on reason goes there)
allstop: AllStop | None = None  # this rank's part in all-stop (``rtdebug.rank.allstop``), None where it has none
