"""``--stop-on COND[,COND...]``: when every rank of a job stops, parsed once for the shell and the ranks.

Conditions (what each installs: ``rtdebug.rank.stopon``):

- ``nonfinite`` -- a NaN or Inf in the loss given to ``backward()``, in a DDP gradient bucket (before its
  all-reduce: that rank is the origin; after it: every rank sees it at the same bucket of the same step);
  ``nonfinite:deep`` adds forward hooks that name the first module whose output went non-finite;
- ``disagree[:N]`` -- every N optimizer steps (default 100) the data-parallel replicas compare a hash of
  their parameters with one small all-gather;
- ``step=N`` -- every rank stops before its optimizer step N (counting from 0: the steps already taken).

Off (the default) installs nothing. The launcher hands the text to ranks in ``ENV``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rtdebug.common.errors import usage

ENV = "RTDEBUG_STOP_ON"
DEFAULT_DISAGREE_EVERY = 100
FORMS = "nonfinite, nonfinite:deep, disagree, disagree:N, step=N"
_DISAGREE = re.compile(r"^disagree(?::(\d{1,9}))?$")
_STEP = re.compile(r"^step=(\d{1,12})$")


@dataclass(frozen=True)
class StopOn:
    nonfinite: bool = False
    deep: bool = False
    disagree_every: int | None = None
    step: int | None = None

    @property
    def any(self) -> bool:
        return self.nonfinite or self.disagree_every is not None or self.step is not None

    def text(self) -> str:
        """The canonical spelling (what ``ENV`` carries and ``ps`` shows)."""
        parts = ["nonfinite:deep" if self.deep else "nonfinite"] if self.nonfinite else []
        if self.disagree_every is not None:
            parts.append(f"disagree:{self.disagree_every}")
        if self.step is not None:
            parts.append(f"step={self.step}")
        return ",".join(parts)


def parse(spec: str | None) -> StopOn:
    """``"nonfinite,step=5"`` -> StopOn; "" or None -> off. A bad condition is one usage line naming the forms."""
    if not spec or not spec.strip():
        return StopOn()
    nonfinite = deep = False
    every: int | None = None
    step: int | None = None
    for raw in spec.split(","):
        cond = raw.strip()
        if cond in ("nonfinite", "nonfinite:deep"):
            nonfinite, deep = True, deep or cond.endswith(":deep")
        elif (m := _DISAGREE.match(cond)) is not None:
            every = int(m.group(1) or DEFAULT_DISAGREE_EVERY)
            if every < 1:
                raise usage(f"--stop-on {cond}: N must be at least 1")
        elif (m := _STEP.match(cond)) is not None:
            step = int(m.group(1))
        else:
            shown = ascii(cond[:40])
            raise usage(f"--stop-on: unknown condition {shown}; the conditions are {FORMS}")
    return StopOn(nonfinite, deep, every, step)
