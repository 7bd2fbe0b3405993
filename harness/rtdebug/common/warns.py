"""rtdebug's own warnings: the ``RtdebugWarning`` category, and the one format for it.

``rtdebug run`` runs the user's script in its own process, so the format ``cli.main`` installs meets the
script's warnings too (its own ``UserWarning``s, pydantic's and Ray Data's deprecations). Only a warning of
rtdebug's category is printed as ``rtdebug: warning: <message>``; every other one keeps the format that was
in place (Python's: ``file:line: Category: message`` and the source line). Filters are untouched: the
script's ``warnings.simplefilter``, ``-W`` and ``PYTHONWARNINGS`` decide, as under ``python``. The category
is not a ``UserWarning``, so ``-W error::UserWarning`` given for the script never turns rtdebug's own
warnings into errors.
"""

from __future__ import annotations

import warnings
from typing import Any


class RtdebugWarning(Warning):
    """A warning of rtdebug's own (printed as ``rtdebug: warning: <message>``)."""


def warn(message: str, stacklevel: int = 2) -> None:
    """``warnings.warn`` of rtdebug's category, attributed to the caller's caller as ``stacklevel`` says."""
    warnings.warn(message, RtdebugWarning, stacklevel=stacklevel + 1)


def install() -> None:
    """rtdebug's format for its own category, in front of whatever format is in place (once per process)."""
    current = warnings.formatwarning
    if getattr(current, "__rtdebug__", False):
        return

    def formatwarning(message: Any, category: Any, filename: str, lineno: int, line: str | None = None) -> str:
        if isinstance(category, type) and issubclass(category, RtdebugWarning):
            return f"rtdebug: warning: {message}\n"
        return current(message, category, filename, lineno, line)

    formatwarning.__rtdebug__ = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning
