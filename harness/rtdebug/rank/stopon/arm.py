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

from rtdebug.common import stopon
from rtdebug.common.imports import when_imported
from rtdebug.rank.stopon import agree, ddp, halt

_TORCH_DIR: list[str] = []
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_state: dict[str, Any] = {"cond": stopon.StopOn(), "steps": 0, "clock": None, "installed": set()}


def install(spec: str) -> stopon.StopOn:
    """Arm the conditions in ``spec`` (``rtdebug.common.stopon``), replacing any armed before; off installs
    nothing. Also on a running rank (``configure``): hooks go in once, and read the conditions each time."""
    cond = stopon.parse(spec)
    _state["cond"] = cond
    ddp.enable(cond.nonfinite)
    if cond.any:
        when_imported("torch", _on_torch)
    return cond


def configure(spec: str) -> str:
    """``--stop-on`` set on a running rank (the VS Code command evaluates this through DAP; ``rtdebug adopt``
    calls it): one line saying what this rank now stops on. DDP models made before it are checked too."""
    from rtdebug.common.errors import HarnessError

    try:
        cond = install(spec)
    except HarnessError as exc:
        return f"rtdebug: {exc.message}"
    rank = os.environ.get("RANK", "0")
    if cond.any and "torch" in sys.modules:
        try:
            ddp.adopt_existing()
        except Exception as exc:  # an answer through DAP, never an exception in the rank's evaluate
            return f"rtdebug: rank {rank}: could not watch the job's DDP models: {type(exc).__name__}: {exc}"
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
    cond: stopon.StopOn = _state["cond"]
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
        bad = agree.begin(self)
        out = original(self, *args, **kwargs)
        event = agree.end(bad, steps())
        if event is not None:
            reason, origin = agree.describe(event, steps())
            halt.stop("nonfinite", reason, user_frame(1), origin, steps())
        return out

    torch.Tensor.backward = backward


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _state["clock"] is None:
        _state["clock"] = id(optimizer)  # the first optimizer that steps is the clock
    if _state["cond"].nonfinite and id(optimizer) not in _state["installed"]:
        _state["installed"].add(id(optimizer))  # a job without DDP: its gradients are watched from now on
        for group in optimizer.param_groups:
            for p in group["params"]:
                ddp.hook(p)
    if _state["clock"] != id(optimizer):
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
