"""Replay: every group the script makes answers its collectives from the capsule, as rank R received them.

``install`` (from ``rank.startup.fixes``) opens the capsule (a bad one ends in one line before the script
runs), restores the rank's initial ``random``/``numpy`` states and arms a post-import hook. Then no
rendezvous happens (``init_process_group`` gets a private ``HashStore`` whatever the script names) and every
group torch builds is a ``ReplayGroup`` whose collectives take the next record of that group, in order,
copy what the rank received into the outputs, and return completed work.

At each collective what the rank sends is checked against the capture's fingerprint. The first difference
is one line on stderr and, with a client attached, a stop at the user's line; the replay then goes on with
the captured values (what the peers sent does not depend on this rank's edit). An op other than the one
captured, or a collective past the capture's end, cannot be served: one line, and the script ends (exit 1).
"""

from __future__ import annotations

import os
import random
import sys
from collections import deque
from typing import Any

from rtdebug.capsule.read import CapsuleError, RankLog, open_capsule
from rtdebug.common.imports import when_imported
from rtdebug.rank.replay import meetings, ops

OURS = "rtdebug_replay"


class _State:
    log: RankLog | None = None
    rank = 0
    check = True
    tolerance = 0.0
    stop_at = 0
    diverged = False
    groups = 0
    queues: dict[int, deque[dict[str, Any]]] = {}
    internal: tuple[str, ...] = ()


_s = _State()


def install(
    replay_dir: str, rank: int, check: bool = True, tolerance: float = 0.0, stop_at: int = 0, scratch: str = ""
) -> None:
    """Serve rank ``rank`` of the capsule in ``replay_dir`` to this process (raises ``CapsuleError``); Ray
    Train's storage goes under ``scratch``."""
    if not replay_dir:
        return
    log = open_capsule(replay_dir).rank(rank)
    _s.log, _s.rank, _s.check, _s.tolerance, _s.stop_at = log, rank, check, tolerance, stop_at
    _s.queues = {}
    for record in log.collectives():
        if record["n"] <= log.complete_upto:
            _s.queues.setdefault(int(record.get("g", -1)), deque()).append(record)
    meetings.arm_serve(log.records, rank, scratch)
    os.environ["TORCH_DIST_INIT_BARRIER"] = "0"  # no store-based barrier: there are no peers
    state = log.info.get("random_state")
    if isinstance(state, list) and len(state) == 3 and isinstance(state[1], list):
        random.setstate((state[0], tuple(state[1]), state[2]))
    when_imported("numpy.random", _numpy_state)
    when_imported("torch.distributed", _patch)


def _numpy_state(np_random: Any) -> None:
    state = _s.log.info.get("numpy_state") if _s.log is not None else None
    if isinstance(state, list) and len(state) == 5:
        import numpy

        np_random.set_state((state[0], numpy.array(state[1], dtype=numpy.uint32), *state[2:]))


def _patch(dist: Any) -> None:
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    _s.internal = ops.internal_dirs()
    ops.divert(c10d, OURS, _factory, ["cpu", "cuda"])

    def rendezvous(url: str, rank: int = -1, world_size: int = -1, **kwargs: Any) -> Any:
        rank = int(os.environ.get("RANK", "0")) if rank == -1 else rank
        world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size == -1 else world_size
        yield dist.HashStore(), rank, world_size

    c10d.rendezvous = rendezvous  # type: ignore[attr-defined]
    dist.rendezvous = rendezvous  # what scripts (and rtdebug's own fit() controller) call by that name


def _factory(o: Any, backend_options: Any) -> Any:
    import torch
    from torch._C._distributed_c10d import FakeProcessGroup

    g = _s.groups
    _s.groups += 1
    pg = _group_class()(o.group_rank, o.group_size, g)
    fake = FakeProcessGroup._create_internal(o.group_rank, o.group_size)
    pg._register_backend(torch.device("cpu"), torch.distributed.ProcessGroup.BackendType.CUSTOM, fake)
    return pg


_cls: list[Any] = []


def _group_class() -> Any:
    if _cls:
        return _cls[0]
    import torch.distributed as dist

    class ReplayGroup(dist.ProcessGroup):
        def __init__(self, rank: int, size: int, g: int) -> None:
            super().__init__(rank, size)
            self.g = g

        def getBackendName(self) -> str:  # noqa: N802  (torch's name)
            return OURS

    for method in (*ops.METHODS, *ops.UNKNOWN):
        setattr(ReplayGroup, method, _served(method))
    _cls.append(ReplayGroup)
    return ReplayGroup


def _served(method: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _serve(self, method, (*args, *kwargs.values()))  # barrier(opts=opts): trailing, in order

    call.__name__ = method
    return call


def _fatal(line: str) -> None:
    """A collective this replay cannot serve: one line, and the script ends (exit 1)."""
    print(f"rtdebug: replay of rank {_s.rank}{line}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    raise SystemExit(1)


def _serve(pg: Any, method: str, args: tuple[Any, ...]) -> Any:

    if ops.by_rtdebug(_s.internal[1]):  # --stop-on's agreement: this rank is the whole world now
        ops.alone(method, args, pg.rank())
        return _done(ops.tensors(method, args, pg.rank())[1])
    frame = ops.user_frame(_s.internal)
    name = ops.METHODS.get(method, method)
    here = f"{name}, DDP gradient bucket" if ops.in_backward(_s.internal) else name
    here = f"{here}, {ops.site(frame)}"
    queue = _s.queues.get(pg.g)
    log = _s.log
    assert log is not None
    if not queue:
        _fatal(
            f": the script makes more collectives than the capture holds: capture ends at collective "
            f"#{log.complete_upto} (then {here})"
        )
    assert queue is not None
    record = queue.popleft()
    n = record["n"]
    if _s.stop_at and n == _s.stop_at:
        print(
            f"rtdebug: replay of rank {_s.rank}: stopped before collective #{n} ({here})", file=sys.stderr, flush=True
        )
        _suspend(frame)
    sent, received = ops.tensors(method, args, pg.rank())
    if record.get("op") != ops.CANON.get(method, method):
        _fatal(
            f" diverged at collective #{n} ({here}): the capture has {_captured(record)} there; a replay cannot go on"
        )
    outputs = _outputs(log, record, received, here)
    if _s.check and not _s.diverged:
        _check(record, sent, frame, here)
    _fill(outputs, received)
    return _done(received)


def _done(received: list[Any]) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]
    from torch.futures import Future

    fut: Any = Future()
    fut.set_result(received)
    return _create_work_from_future(fut)


def _captured(record: dict[str, Any]) -> str:
    where = "a DDP gradient bucket" if record.get("ddp") else f"group {record.get('g')} #{record.get('seq')}"
    return f"{record.get('name')} ({where}, {record.get('site')})"


def _check(record: dict[str, Any], sent: list[Any], frame: Any, here: str) -> None:
    captured = record.get("in", [])
    if len(captured) != len(sent):
        delta: float | None = float("inf")
    else:
        deltas = [ops.differs(ops.fingerprint(t), c, _s.tolerance) for t, c in zip(sent, captured, strict=True)]
        found = [d for d in deltas if d is not None]
        delta = max(found) if found else None
    if delta is None:
        return
    _s.diverged = True
    what = "another shape or dtype" if delta == float("inf") else f"|Δ sum| {delta:.1e}"
    print(
        f"rtdebug: replay of rank {_s.rank} diverged at collective #{record['n']} ({here}): "
        f"the input differs from the capture ({what})",
        file=sys.stderr,
        flush=True,
    )
    _suspend(frame)


def _suspend(frame: Any) -> None:
    if frame is None:
        return
    from rtdebug.rank.collectives import nextstop

    nextstop.suspend(frame)


def _outputs(log: RankLog, record: dict[str, Any], received: list[Any], here: str) -> list[Any]:
    """What the capture says rank R received here, as (dtype, shape, bytes); one line if it cannot fit."""
    got = [log.tensor(out) for out in record.get("out", [])]
    shapes = [f"{list(t.shape)} {ops.st_dtype(t)}" for t in received]
    captured = [f"{shape} {dtype}" for dtype, shape, _ in got]
    if shapes != captured:
        _fatal(
            f" diverged at collective #{record['n']} ({here}): it receives {', '.join(shapes) or 'nothing'} where "
            f"the capture's {_captured(record)} has {', '.join(captured) or 'nothing'}; a replay cannot go on"
        )
    return got


def _fill(outputs: list[Any], received: list[Any]) -> None:
    import torch

    for (dtype, shape, data), target in zip(outputs, received, strict=True):
        if target.numel() == 0:
            continue
        src = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, ops.TORCH_DTYPES[dtype]))
        with torch.no_grad():
            target.copy_(src.reshape(shape))


__all__ = ["CapsuleError", "install"]
