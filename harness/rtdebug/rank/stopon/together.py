"""Arm ``--stop-on`` in a running job (``rtdebug adopt --stop-on``, VS Code's "Stop All Ranks When…") so
that every rank starts checking at the same step.

Why: the ranks are reached one by one, a step or more apart. A rank that is armed while its peer is not
could enter a collective of ours (the event's all-reduce, ``disagree``'s all-gather) that the peer never
enters: the job would hang. So a rank that is set while the job runs only waits (``pending``), and at each
step's start (a backward, an optimizer step) tries to meet the others through the job's own store
(torchrun's, Ray's: every rank has it, as the process group's):

- each rank says it is armed (``<gen>/armed/<rank>``); until all have, nothing is tried (one store
  ``check`` a step, only while pending);
- then, at a step's start, a rank counts itself in under the step's name -- the collective sequence
  number of the group the gradients are reduced on (DDP's, else the default group), the same on every
  rank at the same step -- and waits for the others up to ``WAIT_S``. The one outcome is decided once
  for all by ``compare_set`` on the step's key (``go`` when all had come, ``abort`` when one gave up
  waiting), so either every rank arms at that step or none does and they try again at the next. Each
  rank waits only while the others are at most a step away, and a waiting rank is outside any
  collective; after ``TRIES`` aborts the rank gives up and says so.

A single process (no process group) arms at once. Everything from the store may be forged by whoever can
write it, as the job's own rendezvous could; a value we do not expect is an abort, never an exception.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rtdebug.common import log

WAIT_S = 0.5
TRIES = 8
_state: dict[str, Any] = {"gen": None, "tried": None, "aborts": 0, "said": False}


def distributed() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def pending(gen: str) -> str | None:
    """Start waiting for the others under generation ``gen`` (the same on every rank); None: armed at once
    is fine (no process group), else why this rank cannot arm in a running job (one line)."""
    dist = distributed()
    if dist is None:
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:  # its peers may have a group already
            raise RuntimeError("this rank has no process group yet; set it again once the job has made one")
        return None
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"rtdebug/stopon/{gen}/armed/{dist.get_rank()}", "1")
        _seq(dist)
    except Exception as exc:  # no store, or no sequence number on this backend: cannot arm safely
        log.swallowed("rank.stopon.together: no store or sequence number: cannot arm a running job")
        raise RuntimeError(f"the job's store or step clock is out of reach ({type(exc).__name__}: {exc})") from None
    _state.update(gen=gen, tried=None, aborts=0, said=False)
    return "pending"


def _seq(dist: Any) -> int:
    """The step's name: the sequence number of the group the job's gradients are reduced on (DDP's, else
    the default group), which moves every step; the same on every rank at the same step."""
    from rtdebug.rank.stopon import ddp

    group = ddp.replica_group() or dist.distributed_c10d._get_default_group()
    return int(group._get_sequence_number_for_group())


def cancel() -> None:
    _state["gen"] = None


def meet() -> bool:
    """At a step's start: True when every rank arms here (call once per step's start while pending)."""
    gen, dist = _state["gen"], distributed()
    if gen is None or dist is None:
        return gen is not None
    try:
        return _meet(dist, gen)
    except Exception as exc:  # the store went away (the job ends?): stay unarmed, said once
        log.swallowed("rank.stopon.together: the store failed while arming")
        _give_up(f"the job's store failed ({type(exc).__name__})")
        return False


def _meet(dist: Any, gen: str) -> bool:
    store, world, seq = dist.distributed_c10d._get_default_store(), dist.get_world_size(), _seq(dist)
    if seq == _state["tried"]:
        return False
    if not store.check([f"rtdebug/stopon/{gen}/armed/{r}" for r in range(world)]):
        return False  # not every rank is set yet: nothing tried (and this step may be tried again)
    _state["tried"] = seq
    key = f"rtdebug/stopon/{gen}/at/{seq}"
    came = int(store.add(key + "/n", 1))
    deadline = time.monotonic() + WAIT_S
    while came < world and time.monotonic() < deadline and not store.check([key + "/state"]):
        time.sleep(0.002)  # a rank that comes after the others gave up finds their "abort" at once
        came = int(store.add(key + "/n", 0))
    outcome = store.compare_set(key + "/state", "", "go" if came >= world else "abort")
    if outcome == b"go":
        _state["gen"] = None
        return True
    _state["aborts"] += 1
    if _state["aborts"] >= TRIES:
        _give_up(f"the ranks did not meet at a step in {TRIES} tries")
    return False


def _give_up(why: str) -> None:
    _state["gen"] = None
    if not _state["said"]:
        _state["said"] = True
        print(f"rtdebug: --stop-on was not armed: {why}; set it again to retry", file=sys.stderr, flush=True)
