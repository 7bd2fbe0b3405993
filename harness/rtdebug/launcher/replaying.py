"""``rtdebug replay`` in the one-process launcher (``rtdebug.launcher.single``): rank R of a capsule, alone.

What differs from ``rtdebug run``: the process takes the captured rank's torchrun / Ray Train variables
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ...) and working directory, its ``RankConfig`` carries the
capsule (the rank's ``rtdebug.rank.replay.serve`` hands back what each collective returned in the job),
and its session entry says it is a replay (``mode: replay`` and a ``replay`` field: ``rtdebug ps`` lists it
as a session of its own). Checkpoints and Ray Train storage go under a scratch folder inside the capsule,
emptied at each start (a replay must not resume from what the previous one wrote), said at start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from rtdebug.common.config import REPLAY_SCRATCH_VAR, ReplayTarget
from rtdebug.common.errors import HarnessError, printable, usage
from rtdebug.common.filelocks import LockTimeout, locked

MARKER = ".rtdebug-scratch"
_HELD = contextlib.ExitStack()  # the scratch folder's lock, held until the process ends
# what the replayed rank must not inherit from the shell it was started in (they would contradict the capsule)
FOREIGN = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "GROUP_WORLD_SIZE")


def prepare(replay: ReplayTarget) -> dict[str, str]:
    """Make the scratch folder afresh, enter the captured working directory; the variables to set. Only a
    folder this module made (its marker inside) is ever emptied, and no link is followed on the way."""
    scratch = Path(replay.scratch)
    for p in (scratch.parent, scratch):
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            raise usage(f"cannot prepare the replay: {p} is not a folder rtdebug made")
    try:
        scratch.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _hold(scratch.parent / f"{scratch.name}.lock", replay.rank)
        if scratch.exists():
            if not (scratch / MARKER).is_file():
                raise usage(f"cannot prepare the replay: {scratch} is not a folder rtdebug made; move it away")
            shutil.rmtree(scratch)
        scratch.mkdir(mode=0o700, parents=True)
        (scratch / MARKER).write_text("rtdebug replay scratch: emptied at each replay of this rank\n")
        os.chdir(replay.cwd)
    except OSError as exc:
        raise usage(f"cannot prepare the replay: {exc.filename}: {exc.strerror}") from None
    for name in FOREIGN:
        os.environ.pop(name, None)
    return {**replay.env, REPLAY_SCRATCH_VAR: replay.scratch}  # the scratch: for the rank side and the script


def _hold(lock: Path, rank: int) -> None:
    """One replay of a rank of a capsule at a time: a second would empty the scratch folder under the first.
    The lock is held for this process's life (a flock: released however it ends)."""
    try:
        _HELD.enter_context(locked(lock, 0))
    except LockTimeout:
        raise HarnessError(
            f"another replay of rank {rank} of this capsule is running: its scratch folder is in use"
        ) from None


def entry_fields(replay: ReplayTarget) -> dict[str, Any]:
    return {
        "mode": "replay",
        "replay": {
            "capsule": replay.capsule,
            "rank": replay.rank,
            "world_size": replay.world_size,
            "scratch": replay.scratch,
        },
    }


def place(replay: ReplayTarget) -> dict[str, int]:
    """Where the rank sat in the job, for its registry entry: rank, world size, local and node rank."""

    def number(name: str) -> int:
        value = replay.env.get(name, "0")
        return int(value) if value.isdigit() else 0

    return {
        "rank": replay.rank,
        "world_size": replay.world_size,
        "local_rank": number("LOCAL_RANK"),
        "node_rank": number("GROUP_RANK"),
    }


def start_words(replay: ReplayTarget) -> str:
    return (
        f"replay of rank {replay.rank} of {replay.world_size} from {replay.capsule}: runs {printable(replay.runs)} "
        f"in {printable(replay.cwd)}; checkpoints and Ray Train storage go under {replay.scratch}"
    )
