"""Ray Train's collectives in the rank's collective record: ``ray.train.report`` entered, returned.

The record numbers them in one sequence (group ``ray.train``), as Ray's own synchronization numbers every
Ray Train collective of a worker, so ``stacks`` can say ``rank 1 never entered ray.train.report #3``; the
call site it keeps is the user's line, not Ray's wrapper around it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from rtdebug.rank.collectives import recorder


@functools.cache
def _ray_is_not_the_call_site() -> None:
    """Once: Ray Train's wrapper frames around a named op are not its call site."""
    import ray.train

    recorder.not_the_call_site(os.path.dirname(os.path.dirname(ray.train.__file__)))


class call:
    """One call of ``op`` (``ray.train.report``), as a ``with`` block: entered in the collective record (when
    it is on) before the rank waits for the others, returned after. A class, not a generator, so no frame of
    contextlib's sits between the user's call and the record."""

    def __init__(self, op: str) -> None:
        self.op, self.gen = op, -1
        _ray_is_not_the_call_site()

    def __enter__(self) -> None:
        self.gen = recorder.entering(self.op)

    def __exit__(self, *exc: Any) -> None:
        recorder.returned(self.gen)
