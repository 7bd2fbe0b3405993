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
from typing import Any

from rtdebug.common import log, stopon
from rtdebug.common.imports import when_imported
from rtdebug.rank.stopon import agree, ddp, halt, together

_TORCH_DIR: list[str] = []
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
# cond: the conditions in force; pending: set on a running job, in force from the step all ranks meet at
_state: dict[str, Any] = {"cond": stopon.StopOn(), "pending": None, "steps": 0, "clock": None, "installed": set(),
                          "configured": 0}  # fmt: skip


def install(spec: str) -> stopon.StopOn:
    """Arm the conditions in ``spec`` (``rtdebug.common.stopon``) at once, replacing any armed before; off
    installs nothing. For a rank that starts with them (every rank is armed before its first step)."""
    cond = stopon.parse(spec)
    _state["pending"] = None
    together.cancel()
    _activate(cond)
    return cond


def _activate(cond: stopon.StopOn) -> None:
    _state["cond"] = cond
    ddp.enable(cond.nonfinite)
    if cond.any:
        when_imported("torch", _on_torch)


def armed() -> str:
    """The conditions in force in this rank ('' when none; a pending change is not yet in force)."""
    cond: stopon.StopOn = _state["cond"]
    return cond.text() if cond.any else ""


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
    _state["configured"] += 1
    try:
        if together.pending(gen or f"{_state['configured']}-{cond.text()}") is None:
            install(spec)  # no process group: nothing to agree on
        else:
            _state["pending"] = cond
        _state["existing"] = cond.any  # DDP models made before: hooked at the next step's start (below)
        when_imported("torch", _on_torch)  # the step hooks, where the ranks meet
    except Exception as exc:  # an answer through DAP, never an exception in the rank's evaluate
        log.swallowed("rank.stopon.arm: configure failed: answered as one line")
        return f"rtdebug: rank {rank}: --stop-on not set: {type(exc).__name__}: {exc}"
    return f"rtdebug: rank {rank} stops on {cond.text()}" if cond.any else f"rtdebug: rank {rank}: --stop-on is off"


def steps() -> int:
    """Optimizer steps this rank has taken (the step clock)."""
    return int(_state["steps"])


def user_frame(depth: int = 2) -> Any:
    """The first frame outside torch and rtdebug above the caller: where the user called backward/step."""
    f: Any = sys._getframe(depth)
    while f is not None and f.f_code.co_filename.startswith((*_TORCH_DIR, _OWN_DIR)):
        f = f.f_back
    return f or sys._getframe(depth)


def _on_torch(torch: Any) -> None:
    done: set[str] = _state["installed"]
    if not _TORCH_DIR:
        _TORCH_DIR.append(os.path.dirname(torch.__file__) + os.sep)
    cond: stopon.StopOn = _state["pending"] or _state["cond"]
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
        if not _state["cond"].nonfinite:
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


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _state["clock"] is None:
        _state["clock"] = id(optimizer)  # the first optimizer that steps is the clock
    if _state.pop("existing", False):
        # set on a running rank: its DDP models' gradients are hooked here, in the thread that trains,
        # between two backwards (``adopt`` may run configure in a thread of its own, mid-backward)
        ddp.adopt_existing()
    if _state["cond"].nonfinite and id(optimizer) not in _state["installed"]:
        _state["installed"].add(id(optimizer))  # a job without DDP: its gradients are watched from now on
        for group in optimizer.param_groups:
            for p in group["params"]:
                ddp.hook(p)
    if _state["clock"] != id(optimizer):
        return
    if _state["pending"] is not None and together.meet():  # every rank changes here, at this step
        _state["steps"] = -1  # counted from here: this step is 0 once it is taken
        _activate(_state["pending"])
        _state["pending"] = None
        return
    cond: stopon.StopOn = _state["cond"]
    n = steps()
    if cond.step is not None and n == cond.step:
        halt.stop("step", f"before optimizer step {n}", user_frame(1), None, n)
    if cond.disagree_every is not None and n > 0 and n % cond.disagree_every == 0:
        from rtdebug.rank.stopon import disagree

        found = disagree.check(optimizer, ddp.names(), ddp.replica_group())
        if found is not None:
            reason, odd = found
            halt.stop("disagree", f"{reason} at step {n}", user_frame(1), odd, n)


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _state["clock"] == id(optimizer):
        _state["steps"] += 1
