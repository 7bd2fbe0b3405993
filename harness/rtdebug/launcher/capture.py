"""``--capture DIR`` in the launcher: the capsule's folder made before the ranks start, and the launch facts
only the launcher knows (the script, its arguments, the working directory, torchrun's shape), handed to the
capturing ranks in their ``RankConfig`` (``rtdebug.common.config.LaunchFacts``) for the capsule's manifest.

A capsule is never written over: a folder that already holds one of this node's ``rank-R`` parts is
refused in one line before anything starts. Another node's parts (a shared file system) are left alone. A
folder that is not the user's, or that other users can write to, is refused too (``_check_owner``).
A job stopped by a signal (Ctrl-C, ``rtdebug stop``) says so in its capsule: ``interrupted`` closes the parts
of this node's ranks that the teardown killed before they could (``end.json``: ``interrupted (SIGINT)``).
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterable
from pathlib import Path

from rtdebug.capsule.write import close_unclosed
from rtdebug.common import log
from rtdebug.common.config import LaunchFacts, Target, capture_rank_set
from rtdebug.common.errors import usage


def prepare(directory: str, ranks: list[int], selector: str, world_size: int | None) -> str:
    """Make ``directory`` (0700 where new) for the ranks this node captures; its absolute path."""
    chosen = capture_rank_set(selector, world_size)
    path = Path(directory).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise usage(f"--capture {directory}: not a directory")
    mine = [r for r in ranks if chosen is None or r in chosen]
    taken = [r for r in mine if os.path.lexists(path / f"rank-{r}")]  # a link, even to nothing, is not ours
    if taken:
        raise usage(f"--capture {directory}: it already holds a capture of rank {taken[0]}; pick a new folder")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise usage(f"--capture {directory}: cannot make the folder: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise usage(f"--capture {directory}: not writable")
    _check_owner(directory, path)
    return str(path)


def _check_owner(directory: str, path: Path) -> None:
    """A replay trusts what a capsule holds: its folder is the user's, and no one else can write to it (as the
    registry's root). Others may read it (a capsule is shared to be replayed elsewhere). A link to it must be
    the user's or root's: another user's could be pointed elsewhere between the capture and the replay."""
    me = os.geteuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
        raise usage(f"--capture {directory}: a symbolic link owned by uid {link.st_uid}; give the real folder")
    st = os.stat(path)
    if st.st_uid != me:
        raise usage(
            f"--capture {directory}: the folder belongs to uid {st.st_uid}, not to you (uid {me}); "
            "a replay trusts what a capsule holds: pick a folder of your own"
        )
    if st.st_mode & 0o022:
        mode = oct(stat.S_IMODE(st.st_mode))
        raise usage(f"--capture {directory}: other users can write to it (mode {mode}); run: chmod go-w {path}")


def launch_facts(
    mode: str,
    target: Target,
    session_id: str,
    nnodes: str = "1",
    nproc_per_node: int = 1,
    torchrun_options: list[str] | None = None,
) -> LaunchFacts:
    script = target.target if target.module else os.path.abspath(target.target)
    return LaunchFacts(
        mode=mode,
        script=script,
        module=target.module,
        argv=list(target.args),
        cwd=os.getcwd(),
        nnodes=nnodes,
        nproc_per_node=nproc_per_node,
        torchrun_options=list(torchrun_options or []),
        session_id=session_id,
    )


def interrupted(directory: str, ranks: Iterable[int], signum: int) -> None:
    """After the teardown of a job stopped by ``signum``: close each of ``ranks``' parts left open (a rank
    killed by the teardown writes no ``end.json``), so that the capsule says it was interrupted."""
    reason = f"interrupted ({signal.Signals(signum).name})"
    for rank in sorted(set(ranks)):
        try:
            close_unclosed(directory, rank, reason)
        except OSError:  # a full disk: the reader sees an unclosed part (the end of a killed rank's capture)
            log.swallowed(f"launcher.capture: rank {rank}'s part left open")
