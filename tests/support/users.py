"""Acting as another uid: ``nobody`` through ``setpriv`` (needs root)."""

from __future__ import annotations

import os
import shutil

import pytest

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
needs_setpriv = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act as another uid"
)
