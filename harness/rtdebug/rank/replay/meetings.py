"""Ray Train local mode's meetings in a capsule: what each ``barrier``, ``broadcast_from_rank_zero``,
``report()`` and ``fit()`` meeting gave this rank (``rtdebug.rank.localmode.sync``, through its ``tap``).

A capture records, in order, every meeting's outcome as the bytes the job's store held (what each rank
brought, rank 0's answer, who was first); a replay answers each meeting from them, so rank R alone sees
rank 0's broadcast value and the checkpoint directory the ranks agreed on. In a replay the run's
``storage_path`` (the ``fit()`` meeting) is the replay's scratch folder: it writes nothing where the job wrote.
"""

from __future__ import annotations

import base64
import copy
import pickle
import sys
from collections import deque
from typing import Any

from rtdebug.capsule.write import CapsuleWriter

FIT = "rtdebug.fit"  # rtdebug.rank.localmode.controller's meeting on the run's name and storage path


class CaptureTap:
    serving = False

    def __init__(self, writer: CapsuleWriter) -> None:
        self.writer = writer

    def record(self, call: str, op: str, n: int, value: Any) -> None:
        if isinstance(value, (bytes, bytearray)):
            kept: Any = _b64(value)
        elif isinstance(value, list):
            kept = [_b64(v) for v in value]
        else:
            kept = value
        record = {"kind": "meet", "call": call, "op": op, "call_n": n, "value": kept}
        self.writer.submit(lambda: (record, []))


class ServeTap:
    serving = True

    def __init__(self, records: list[dict[str, Any]], rank: int, scratch: str) -> None:
        self.queue = deque(records)
        self.rank, self.scratch = rank, scratch
        self.job_storage = ""  # the job's storage path (the fit() meeting's), said as scratch from then on

    def serve(self, call: str, op: str, n: int) -> Any:
        if not self.queue:
            _fatal(self.rank, f"Ray Train's {op} #{n} is past the capture's last meeting")
        record = self.queue.popleft()
        if (record.get("call"), record.get("op"), record.get("call_n")) != (call, op, n):
            theirs = f"{record.get('op')} #{record.get('call_n')} ({record.get('call')})"
            _fatal(self.rank, f"Ray Train's {op} #{n} ({call}) is where the capture has {theirs}")
        value = record.get("value")
        if call == "first":
            return bool(value)
        if call == "answer":
            return self._here(base64.b64decode(str(value)))
        raw = [base64.b64decode(v) for v in value or []]
        if op == FIT and self.scratch and raw:  # every rank takes rank 0's (name, storage_path): the scratch here
            self.job_storage = str(pickle.loads(raw[0])[1])
        return [self._here(v) for v in raw]

    def alone(self, op: str, mine: Any) -> Any:
        """A meeting of one process (no store: nothing was captured): its own value, but the run's storage
        under the scratch folder, so a replay of a one-process job writes nothing where the job wrote."""
        if op == FIT and self.scratch and isinstance(mine, tuple) and len(mine) == 2:
            return (mine[0], self.scratch)
        return mine

    def _here(self, raw: bytes) -> bytes:
        """``raw`` with every path under the job's storage said under the scratch folder (a checkpoint the
        ranks agreed on is written, and looked for, in the replay's own storage)."""
        if not (self.job_storage and self.scratch) or self.job_storage.encode() not in raw:
            return raw
        return pickle.dumps(_moved(pickle.loads(raw), self.job_storage.rstrip("/"), self.scratch.rstrip("/")))


def _moved(value: Any, old: str, new: str, depth: int = 0) -> Any:
    """``value`` with each string that is ``old`` or under it rewritten under ``new`` (through tuples, lists,
    dicts and objects' attributes: a dataclass, Ray's ``Checkpoint``)."""
    if depth > 20:
        return value
    if isinstance(value, str):
        return new + value[len(old) :] if value == old or value.startswith(old + "/") else value
    if isinstance(value, (list, tuple)):
        items = [_moved(v, old, new, depth + 1) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: _moved(v, old, new, depth + 1) for k, v in value.items()}
    if hasattr(value, "__dict__") and not isinstance(value, type):  # a dataclass, Ray's Checkpoint, ...
        changed = {k: _moved(v, old, new, depth + 1) for k, v in vars(value).items()}
        changed = {k: v for k, v in changed.items() if v is not vars(value)[k]}
        if changed:
            value = copy.copy(value)
            for k, v in changed.items():
                object.__setattr__(value, k, v)  # frozen dataclasses too
    return value


def _b64(data: bytes | bytearray) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _fatal(rank: int, why: str) -> None:
    print(f"rtdebug: replay of rank {rank} diverged: {why}; a replay cannot go on", file=sys.stderr, flush=True)
    raise SystemExit(1)


def arm_capture(writer: CapsuleWriter) -> None:
    from rtdebug.rank.localmode import sync

    sync.tap = CaptureTap(writer)


def arm_serve(records: list[dict[str, Any]], rank: int, scratch: str) -> None:
    from rtdebug.rank.localmode import sync

    sync.tap = ServeTap([r for r in records if r.get("kind") == "meet"], rank, scratch)
