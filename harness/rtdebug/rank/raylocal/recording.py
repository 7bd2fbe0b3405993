"""Ray Train's collectives in the rank's collective record: ``ray.train.report #3`` entered, returned."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def call(op: str, n: int) -> Iterator[None]:
    """Call ``n`` of ``op`` (``ray.train.report``): entered in the collective record (when it is on) before
    the rank waits for the others, returned after."""
    yield
