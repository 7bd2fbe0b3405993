"""rtdebug: debug Ray Train local-mode and torchrun jobs, one debug port per rank.

The public in-script API is :func:`breakpoint`; everything else is driven by the
``rtdebug`` command (``python -m harness``).
"""

from harness.api import breakpoint, current_rank  # noqa: F401

__all__ = ["breakpoint", "current_rank"]
__version__ = "0.1.0"
