"""Arm ``--stop-on`` in a rank: hooks on what the job already does, installed once torch is imported.

- ``Tensor.backward`` (``nonfinite``): the loss's flag before it, the gradients' after it (``ddp``: how
  every rank learns the same event at the same step, with the origin ranks); then the rank stops in the
  user's frame that called ``backward()``, before ``optimizer.step()`` changes the weights.
- torch's global optimizer step hooks: the step clock (the first optimizer that steps), ``step=N``
  (before step N, counting the steps taken) and ``disagree:N`` (``disagree``), in the frame that called
  ``optimizer.step()``.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from rtdebug.common import log, stopon
from rtdebug.common.imports import when_imported
from rtdebug.rank.stopon import agree, ddp, halt, together
from rtdebug.rank.stopon.stepstate import WeakIdMap

_TORCH_DIR: list[str] = []
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


@dataclass
class Arming:
    """What is armed in this rank, and the step clock."""

    cond: stopon.StopOn = field(default_factory=stopon.StopOn)  # the conditions in force
    pending: stopon.StopOn | None = None  # set on a running job: in force from the step all ranks meet at
    steps: int = 0  # optimizer steps the clock has taken
    clock: weakref.ref[Any] | None = None  # the first optimizer that stepped (weakly: a later one is not it)
    installed: set[str] = field(default_factory=set)  # "steps", "backward": torch's hooks that are in
    optimizers: WeakIdMap[bool] = field(default_factory=WeakIdMap)  # optimizers whose parameters are hooked
    configured: int = 0  # changes set on a running job (``configure``)
    existing: bool = False  # set on a running job: its DDP models are hooked at the next step's start


ARMING = Arming()


def install(spec: str) -> stopon.StopOn:
    """Arm the conditions in ``spec`` (``rtdebug.common.stopon``) at once, replacing any armed before; off
    installs nothing. For a rank that starts with them (every rank is armed before its first step)."""
    cond = stopon.parse(spec)
    ARMING.pending = None
    together.cancel()
    _activate(cond)
    return cond


def _activate(cond: stopon.StopOn) -> None:
    ARMING.cond = cond
    ddp.enable(cond.nonfinite)
    if cond.any:
        when_imported("torch", _on_torch)


def armed() -> str:
    """The conditions in force in this rank ('' when none; a pending change is not yet in force)."""
    cond = ARMING.cond
    return cond.text() if cond.any else ""


def changing() -> bool:
    """Whether a change set on a running job waits for the step all ranks reach together."""
    return ARMING.pending is not None


def configure(spec: str, gen: str | None = None) -> str:
    """``--stop-on`` set (or turned off) on a running rank (the VS Code command evaluates this through DAP;
    ``rtdebug adopt`` calls it): one line saying what this rank stops on. In a job with a process group the
    change is in force from the next optimizer step that every rank reaches together (``together``), so no
    rank ever checks, or enters a collective of ours, alone; its step count starts there. DDP models made
    before it are checked too (hooked at the next optimizer step's start). ``gen`` names this change alike
    on every rank (default: its number on this rank)."""
    from rtdebug.common.errors import HarnessError

    rank = os.environ.get("RANK", "0")
    try:
        cond = stopon.parse(spec)
    except HarnessError as exc:
        return f"rtdebug: {exc.message}"
    ARMING.configured += 1
    try:
        if together.pending(gen or f"{ARMING.configured}-{cond.text()}") is None:
            install(spec)  # no process group: nothing to agree on
        else:
            ARMING.pending = cond
        ARMING.existing = cond.any  # DDP models made before: hooked at the next step's start (below)
        when_imported("torch", _on_torch)  # the step hooks, where the ranks meet
    except Exception as exc:  # an answer through DAP, never an exception in the rank's evaluate
        log.swallowed("rank.stopon.arm: configure failed: answered as one line")
        return f"rtdebug: rank {rank}: --stop-on not set: {type(exc).__name__}: {exc}"
    return f"rtdebug: rank {rank} stops on {cond.text()}" if cond.any else f"rtdebug: rank {rank}: --stop-on is off"


def steps() -> int:
    """Optimizer steps this rank has taken (the step clock)."""
    return ARMING.steps


def user_frame(depth: int = 2) -> Any:
    """The first frame outside torch and rtdebug above the caller: where the user called backward/step."""
    f: Any = sys._getframe(depth)
    while f is not None and f.f_code.co_filename.startswith((*_TORCH_DIR, _OWN_DIR)):
        f = f.f_back
    return f or sys._getframe(depth)


def _on_torch(torch: Any) -> None:
    done = ARMING.installed
    if not _TORCH_DIR:
        _TORCH_DIR.append(os.path.dirname(torch.__file__) + os.sep)
    cond = ARMING.pending or ARMING.cond
    if "steps" not in done:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(_before_step)
        register_optimizer_step_post_hook(_after_step)
        done.add("steps")
    if cond.nonfinite and "backward" not in done:
        _wrap_backward(torch)
        done.add("backward")
    if cond.nonfinite or cond.disagree_every is not None:  # disagree needs DDP's group and names only
        ddp.patch(torch, deep=cond.deep)


def _wrap_backward(torch: Any) -> None:
    original = torch.Tensor.backward

    @functools.wraps(original)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not ARMING.cond.nonfinite:
            return original(self, *args, **kwargs)
        bad = agree.begin(self)  # never raises
        try:
            out = original(self, *args, **kwargs)
        except BaseException:
            agree.abandon()  # the job's own error, as it was; nothing of ours is left waiting
            raise
        try:  # a failure of ours is logged and the job goes on: never an exception in its backward()
            event = agree.end(bad, steps())
            if event is not None:
                reason, origin = agree.describe(event, steps())
                halt.stop("nonfinite", reason, user_frame(1), origin, steps())
        except Exception:
            log.swallowed("rank.stopon.arm: the check after backward failed; the job goes on")
        return out

    torch.Tensor.backward = backward


def _is_clock(optimizer: Any) -> bool:
    return ARMING.clock is not None and ARMING.clock() is optimizer


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if ARMING.clock is None or ARMING.clock() is None:
        ARMING.clock = weakref.ref(optimizer)  # the first optimizer that steps is the clock
    if ARMING.existing:
        ARMING.existing = False
        # set on a running rank: its DDP models' gradients are hooked here, in the thread that trains,
        # between two backwards (``adopt`` may run configure in a thread of its own, mid-backward)
        ddp.adopt_existing()
    if ARMING.cond.nonfinite and optimizer not in ARMING.optimizers:
        ARMING.optimizers[optimizer] = True  # a job without DDP: its gradients are watched from now on
        for group in optimizer.param_groups:
            for p in group["params"]:
                ddp.hook(p)
    if not _is_clock(optimizer):
        return
    if ARMING.pending is not None and together.meet():  # every rank changes here, at this step
        ARMING.steps = -1  # counted from here: this step is 0 once it is taken
        _activate(ARMING.pending)
        ARMING.pending = None
        return
    cond = ARMING.cond
    n = steps()
    if cond.step is not None and n == cond.step:
        halt.stop("step", f"before optimizer step {n}", user_frame(1), None, n)
    if cond.disagree_every is not None and n > 0 and n % cond.disagree_every == 0:
        from rtdebug.rank.stopon import disagree

        found = disagree.check(optimizer, ddp.name_of, ddp.replica_group())
        if found is not None:
            reason, odd = found
            halt.stop("disagree", f"{reason} at step {n}", user_frame(1), odd, n)


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _is_clock(optimizer):
        ARMING.steps += 1
