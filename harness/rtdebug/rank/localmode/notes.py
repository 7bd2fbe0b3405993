"""Where the cluster's semantics give the script a different value from Ray's own local mode, one ``rtdebug:``
line says so at the moment the script can first see it: the API, what the cluster does and why, and the way
out (``--ray-local-mode=ray``). Without it a script written after Ray's local-mode guide
(``result.metrics["loss"]`` after reports without a checkpoint) ends in a bare ``TypeError`` and the user
blames rtdebug.

Each function here returns every rank's line (None: that rank's value is Ray's too), computed from what every
rank knows alike (each ``report()`` is a meeting of all ranks), so the ranks agree on who says what:
``LocalRun.say`` says a line once per ``fit()``, by one rank when every rank would say the same, else on each
rank it is true of (``rank 1: ...``). The table of lines is in docs/local-mode.md.

The lines go to the stderr the rank started with (a duplicate taken when local mode is armed): a test runner
that captures the script's output (pytest) would otherwise show them after its report of the failure they
explain, not before it.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass, field
from typing import Any

WAY_OUT = "--ray-local-mode=ray"
_stderr: int | None = None  # the stderr this process started with (``keep_stderr``)


def keep_stderr() -> None:
    """Take a duplicate of fd 2 now, before the script (or pytest) can redirect it."""
    global _stderr
    if _stderr is None:
        try:
            _stderr = os.dup(2)  # not inherited by children (PEP 446)
        except OSError:  # no stderr at all: the lines go wherever sys.stderr goes
            _stderr = None


def say(line: str) -> None:
    """``rtdebug: <line>`` on the rank's own stderr, now; where the script's stderr is captured (pytest), into
    the capture as well, so the failure's report shows it too."""
    text = f"rtdebug: {line}\n"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or odd stream of the script's
            pass
    fd = _stderr
    if fd is None:
        print(text, end="", file=sys.stderr, flush=True)
        return
    moved = not _same_file(fd, 2)  # fd 2 is captured (pytest's fd capture)
    try:
        os.write(fd, (("\n" if moved else "") + text).encode("utf-8", "backslashreplace"))
    except OSError:
        moved = True
    if moved:
        try:
            print(text, end="", file=sys.stderr, flush=True)
        except Exception:
            pass


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@dataclass
class Reports:
    """This ``fit()``'s reports, as every rank knows them after each one."""

    world: int = 1
    count: int = 0
    metrics: list[Any] = field(default_factory=list)  # every rank's metrics of the last report, in rank order
    passed: list[bool] = field(default_factory=list)  # every rank's: it passed a checkpoint to the last report
    checkpointed: int = 0  # the last of this run's reports (1, 2, ...) with any rank's checkpoint; 0: none

    def add(self, metrics: list[Any], passed: list[bool]) -> None:
        self.count += 1
        self.metrics, self.passed = list(metrics), list(passed)
        if any(passed):
            self.checkpointed = self.count

    def passed_by(self, rank: int) -> bool:
        """Whether ``rank``'s last report had a checkpoint: Ray's own local mode keeps that one (or None)."""
        return bool(self.count) and rank < len(self.passed) and self.passed[rank]

    def own_metrics(self, rank: int) -> Any:
        """What Ray's own local mode gives ``rank`` as ``Result.metrics``: its last report's, or None."""
        return self.metrics[rank] if self.count and rank < len(self.metrics) else None


Latest = tuple[str, Any] | None  # the run's latest checkpoint (path, metrics), as the history has it


def _name(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def _reports(n: int) -> str:
    if n == 0:
        return "this run has reported none"
    return "this run's one report had none" if n == 1 else f"none of this run's {n} reports had one"


def result_metrics(seen: Reports, latest: Latest, run: str) -> list[str | None]:
    """``Result.metrics``: the latest checkpoint's metrics (rank 0's of that report) on a cluster; Ray's own
    local mode gives each rank its own last report's."""
    out: list[str | None] = []
    for r in range(seen.world):
        ray_value = seen.own_metrics(r)
        ours = latest[1] if latest is not None else None
        if ray_value is None or same(ray_value, ours):
            out.append(None)
            continue
        why = "it holds the metrics of the last report() with a checkpoint"
        if latest is None:
            line = f"Result.metrics is None, as on a Ray cluster: {why}, and {_reports(seen.count)}"
        elif seen.checkpointed == 0:
            line = (
                f"Result.metrics are those of {_name(latest[0])}, from an earlier run of {run!r}, as on a Ray "
                f"cluster: {why}, and {_reports(seen.count)}"
            )
        elif seen.checkpointed < seen.count:
            line = (
                f"Result.metrics are those of report {seen.checkpointed} of {seen.count}, as on a Ray cluster: "
                f"{why}, and the last report had none"
            )
        else:
            line = (
                "Result.metrics are rank 0's, as on a Ray cluster: the controller keeps rank 0's metrics of each "
                "report() (Ray's own local mode returns this rank's own last report's metrics: "
                f"{WAY_OUT})"
            )
            out.append(line)
            continue
        out.append(f"{line} (Ray's own local mode returns the last report's metrics: {WAY_OUT})")
    return out


def _checkpoint_source(seen: Reports, latest: tuple[str, Any], run: str) -> tuple[str, bool]:
    """Where the run's latest checkpoint came from, when ``rank``'s last report had none; and whether the
    reason is this rank's alone (its peers passed a checkpoint to the same report)."""
    name = _name(latest[0])
    if seen.checkpointed == 0:
        return (
            f"{name}, from an earlier run of {run!r}, as on a Ray cluster: a run with the same "
            f"RunConfig(name, storage_path) resumes from its latest checkpoint, and {_reports(seen.count)}"
        ), False
    if seen.checkpointed < seen.count:
        return (
            f"{name}, of report {seen.checkpointed} of {seen.count}, as on a Ray cluster: it is the run's latest "
            "checkpoint, and the last report had none"
        ), False
    return (
        f"{name}, of the last report, as on a Ray cluster: a report() keeps a checkpoint any rank passes, and "
        "this rank passed none"
    ), True


def result_checkpoint(seen: Reports, latest: Latest, run: str) -> list[str | None]:
    """``Result.checkpoint``: the run's latest checkpoint on a cluster; Ray's own local mode gives each rank
    its own last report's checkpoint, None when that report had none."""
    out: list[str | None] = []
    for r in range(seen.world):
        if latest is None or seen.passed_by(r):
            out.append(None)  # both None, or both a checkpoint (ours the persisted copy: the start line says where)
            continue
        source, own = _checkpoint_source(seen, latest, run)
        rays = "this rank's last report's checkpoint" if own else "the last report's checkpoint"
        out.append(f"Result.checkpoint is {source} (Ray's own local mode returns {rays}, None: {WAY_OUT})")
    return out


def get_checkpoint(seen: Reports, latest: Latest, run: str) -> list[str | None]:
    """``get_checkpoint()``: the run's latest checkpoint on a cluster (a resumed run's from the start); Ray's
    own local mode gives the rank's own last report's, None before the first and after one without."""
    out: list[str | None] = []
    for r in range(seen.world):
        if latest is None or seen.passed_by(r):
            out.append(None)
            continue
        source, own = _checkpoint_source(seen, latest, run)
        if seen.checkpointed == 0:
            rays = "starts over: None"
        else:
            whose = "this rank's last report" if own else "the last report"
            rays = f"returns {whose}'s checkpoint, None"
        out.append(f"get_checkpoint() is {source} (Ray's own local mode {rays}: {WAY_OUT})")
    return out


def reported_checkpoints(world: int, count: int) -> list[str | None]:
    """``get_all_reported_checkpoints()``: the run's checkpoints on a cluster; ``[]`` in Ray's own local mode."""
    if count == 0:
        return [None] * world
    line = (
        f"get_all_reported_checkpoints() lists {count} checkpoint{'s' if count != 1 else ''}, as on a Ray "
        f"cluster: the run's history with each one's metrics (Ray's own local mode returns []: {WAY_OUT})"
    )
    return [line] * world


def broadcast(rank: int) -> str:
    """``broadcast_from_rank_zero(x)``: rank 0's ``x`` on every rank on a cluster; each rank's own in Ray's
    own local mode. Said by the first rank whose own ``x`` differed (only it knows)."""
    return (
        f"broadcast_from_rank_zero() gave rank {rank} rank 0's value instead of its own, as on a Ray cluster: "
        f"every worker gets rank 0's (Ray's own local mode returns each rank's own: {WAY_OUT})"
    )


def fit_raises(exc: BaseException) -> str:
    """``fit()`` of a train function that raised: the cluster's ``WorkerGroupError``, not the exception."""
    kind = type(exc).__name__
    return (
        f"fit() raises ray.train.WorkerGroupError, as on a Ray cluster: the controller wraps the train function's "
        f"{kind} (Ray's own local mode raises the {kind} itself: {WAY_OUT})"
    )


def same(a: Any, b: Any) -> bool:
    """Whether two values are equal, for values ``==`` cannot answer (arrays) by their pickles; True when
    neither can tell (then nothing is said)."""
    try:
        eq = a == b
        if isinstance(eq, bool):
            return eq
    except Exception:
        pass
    try:
        return pickle.dumps(a) == pickle.dumps(b)
    except Exception:
        return True
