"""Where rtdebug's own code lives, for the places that tell its frames from the user's.

A traceback (``rtdebug.rank.execute``) and a stack dump (``rtdebug.stacks.group``) both leave rtdebug's
frames out of what the user reads; both must agree on what those are: anything under this package.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep  # .../rtdebug/
