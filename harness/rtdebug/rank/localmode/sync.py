"""Where the ranks meet for Ray Train's collectives (``barrier``, ``broadcast_from_rank_zero``, ``report``).

On a cluster these go through Ray's synchronization actor: each worker says "I am in call N of
``ray.train.report``", waits until every worker has said so, and a worker that never calls it hangs the
others, with a warning that names the missing ranks. Here the job's own c10d store (the one torchrun's
agent serves to every node, which ``init_process_group`` already uses) plays that actor, under a prefix
of its own: each rank writes its key for the call, waits for all of them, reads what it needs. Nothing
goes through NCCL or any process group, so these calls never queue behind the training's collectives,
and a multi-node job meets the same way. Each call is one named operation (``ray.train.report #3``) in
the rank's collective record, entered before the rank waits and returned after, so ``rtdebug stacks`` says
which rank never entered it. One process (``rtdebug run``, or a world of one) meets no one.
"""

from __future__ import annotations

import pickle
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

SEQUENCE = "ray.train"  # report, barrier, broadcast_from_rank_zero: one sequence of calls
WARN_INTERVAL_S = 30.0  # as Ray's synchronization actor: say who is missing while the others wait
# rtdebug.rank.replay.meetings: records each meeting's outcome (--capture) or answers it (rtdebug replay)
tap: Any = None


@dataclass(frozen=True)
class World:
    """Where this process sits in the job (``LocalTorchController``'s view of torchrun's variables)."""

    size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_size: int = 1
    node_rank: int = 0


@dataclass
class CallExchange:
    """Each rank's value for each of Ray Train's calls, through the job's store, one key space per call:
    ``<op>/<n>/<rank>``, ``<op>/<n>/out``."""

    world: World
    store: Any = None  # the job's c10d store under our prefix; None: a world of one
    calls: dict[str, int] = field(default_factory=dict)
    _done: list[str] = field(default_factory=list)  # keys of finished calls, deleted one call later

    @classmethod
    def create(cls, world: World, attempt: int = 0, fit: int = 1) -> CallExchange:
        """The meetings of this process's ``fit()`` number ``fit``: a key space of its own (a script may call
        ``fit()`` again, and every rank calls it as often), so no call meets a key an earlier ``fit()`` left."""
        if world.size == 1:
            return cls(world)
        import torch.distributed as dist

        base = dist.distributed_c10d._get_default_store()
        return cls(world, dist.PrefixStore(f"rtdebug/ray.train/{attempt}/{fit}/", base))

    def first(self, key: str) -> bool:
        """Whether this rank is the job's first to ask for ``key`` in this ``fit()`` (a world of one: yes)."""
        if self.store is None:
            return True
        if tap is not None and tap.serving:
            return bool(tap.serve("first", key, 0))
        try:
            first = int(self.store.add(f"first/{key}", 1)) == 1
            if tap is not None:
                tap.record("first", key, 0, first)
            return first
        except Exception:  # the store went away: rank 0 speaks for the job
            return self.world.rank == 0

    def next_call(self, op: str) -> int:
        """The call's number: Ray Train's collectives share one sequence (as Ray numbers them), others count
        alone."""
        key = SEQUENCE if op.startswith(SEQUENCE + ".") else op
        n = self.calls[key] = self.calls.get(key, 0) + 1
        return n

    def meet(self, op: str, n: int, mine: Any, want_all: bool = True) -> list[Any] | None:
        """Every rank's ``mine`` for call ``n`` of ``op`` in rank order, once all ranks are in it
        (``want_all=False``: only wait for them, read nothing). A rank that never calls it keeps the
        others waiting, as on a cluster."""
        if self.store is None:
            return [tap.alone(op, mine) if tap is not None and tap.serving else mine]
        if tap is not None and tap.serving:  # a replay: what every rank brought, from the capture
            raw = tap.serve("meet", op, n)
            return None if not want_all else [pickle.loads(v) for v in raw]
        keys = [f"{op}/{n}/{r}" for r in range(self.world.size)]
        self.store.set(keys[self.world.rank], pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL))
        self._wait(keys, op, n)
        self._forget_earlier(keys)
        raw = self.store.multi_get(keys) if want_all else []
        if tap is not None:
            tap.record("meet", op, n, raw)
        return [pickle.loads(v) for v in raw] if want_all else None

    def post(self, op: str, n: int, mine: Any) -> None:
        """This rank's part of call ``n`` of ``op`` for rank 0 alone (which ``meet``s them); no waiting."""
        if self.store is not None:
            self.store.set(f"{op}/{n}/{self.world.rank}", pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL))

    def publish(self, op: str, n: int, value: Any) -> None:
        """Rank 0's answer for call ``n`` of ``op`` (the others ``answer``)."""
        if self.store is not None:
            key = f"{op}/{n}/out"
            self.store.set(key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            self._done.append(key)

    def answer(self, op: str, n: int) -> Any:
        if tap is not None and tap.serving:
            return pickle.loads(tap.serve("answer", op, n))
        key = f"{op}/{n}/out"
        self._wait([key], op, n)
        raw = self.store.get(key)
        if tap is not None:
            tap.record("answer", op, n, raw)
        return pickle.loads(raw)

    def _wait(self, keys: list[str], op: str, n: int) -> None:
        since = time.monotonic()
        while True:
            try:
                self.store.wait(keys, timedelta(seconds=WARN_INTERVAL_S))
                return
            except Exception as exc:  # torch's DistStoreError (a timeout), or the store went away
                if type(exc).__name__ != "DistStoreError" and "timeout" not in str(exc).lower():
                    raise
            waited = time.monotonic() - since
            if keys[0].endswith("/out"):
                print(
                    f"rtdebug: rank {self.world.rank} has waited {waited:.0f}s in {op} #{n}: rank 0 has not answered",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            print(
                f"rtdebug: rank {self.world.rank} has waited {waited:.0f}s in {op} #{n}: "
                f"{'ranks' if len(missing) > 1 else 'rank'} {','.join(map(str, missing))} "
                f"{'have' if len(missing) > 1 else 'has'} not called it",
                file=sys.stderr,
                flush=True,
            )

    def _forget_earlier(self, keys: list[str]) -> None:
        """Everyone is in this call, so everyone has read the previous one: rank 0 drops its keys."""
        if self.world.rank != 0:
            return
        done, self._done = self._done, list(keys)
        for key in done:
            try:
                self.store.delete_key(key)
            except Exception:  # a store without delete_key: the keys stay (small)
                return
