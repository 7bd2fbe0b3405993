"""One rank start-up: what every kind of rank arms, in one place, in one order.

Four kinds of process run rtdebug's rank runtime: a torchrun rank and ``rtdebug run``'s process
(``bootstrap``), a Ray Train worker (``ray_worker``) and a rank of a job started without rtdebug
(``adopted``). Each passes only what differs:

- **where its identity comes from** -- torchrun's variables, rank 0 of ``rtdebug run``, Ray's train
  context, the adopt request -- as the ``RankState`` it builds;
- **where it publishes** -- the record's registry (this machine's files, the Ray KV, a session
  directory's fd) and the session directory the dump thread and the collective record live in (None:
  a Ray worker, whose record is in memory and whose stacks are asked through the KV).

In order: ``fixes`` before the user's code runs (post-import hooks: the local-mode fixes, the
``DeviceMesh`` record, ``--stop-on``), then ``dumps`` (the dump thread and its signal fallback) and
``record`` (the collective record), then ``serve`` (the endpoint, wired to the record). ``disarm`` undoes
what an adopted rank's detach must take out. Nothing here runs per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rtdebug.common.config import RankConfig


def fixes(cfg: RankConfig, rank: int = 0) -> None:
    """Hooks that apply when the job imports torch / Ray: armed before the user's code runs (a Ray worker's
    ``cfg`` holds only its process-group timeout and ``--stop-on``)."""
    from rtdebug.rank import meshes
    from rtdebug.rank.localmode import fixes as localmode_fixes

    localmode_fixes.install(cfg.pg_timeout_s)
    if cfg.capture_dir:  # --capture: this rank's collectives into a capsule
        from rtdebug.rank.replay import capture

        capture.install(cfg.capture_dir, rank, cfg.capture_ranks, cfg.capture_max_gb, launch=cfg.launch)
    if cfg.replay_dir:  # rtdebug replay: every collective answered from the capsule
        from rtdebug.rank.replay import serve

        serve.install(
            cfg.replay_dir,
            rank,
            check=cfg.replay_check,
            tolerance=cfg.replay_tolerance,
            stop_at=cfg.replay_stop_at,
            scratch=cfg.replay_scratch,
        )
    if cfg.ray_local_mode == "cluster":
        from rtdebug.rank.localmode import patch

        patch.install()  # Ray Train's local mode with the cluster's semantics
    meshes.arm()  # each DeviceMesh the job makes goes into the rank's entry (mesh selectors: dp=0,tp=*)
    if cfg.stop_on:
        from rtdebug.rank.stopon import arm

        arm.install(cfg.stop_on)
    if cfg.force_local:
        from rtdebug.rank.localmode import forcelocal

        forcelocal.install()


def dumps(session_dir: Path | str, rank: int) -> dict[str, Any] | None:
    """The rank's dump thread (and the signal fallback): the entry's ``stacks`` field."""
    from rtdebug.rank.stacks import dump

    return dump.arm(Path(session_dir), rank)


def record(session_dir: Path | str | None, rank: int) -> dict[str, str] | None:
    """The collective record (a file in the session directory, or memory): the entry's ``collectives``."""
    from rtdebug.rank.collectives import recorder as collrec

    return collrec.arm(session_dir, rank)


def serve(entry: Any, endpoint: Any, eager: bool, warm_after: float = 0.0) -> None:
    """Wire the endpoint to the rank's record, open it, and make both the process's (``runtime``)."""
    from rtdebug.rank import runtime

    entry.connect(endpoint)
    endpoint.start(eager=eager, warm_after=warm_after)
    runtime.endpoint, runtime.record = endpoint, entry


def disarm() -> None:
    """What detach takes out of an adopted rank: the dump thread and signal, and the collective record."""
    from rtdebug.rank.collectives import recorder as collrec
    from rtdebug.rank.stacks import dump

    dump.disarm()
    collrec.disarm()
