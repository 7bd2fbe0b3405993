"""Torch-free target for tests/project/test_pythons.py: a loop until CTL/go exists, then rtdebug.breakpoint().

Usage: torch_free.py CTL_DIR [--raise]   (--raise: end with an uncaught exception, for --post-mortem)
"""

import sys
import time
from pathlib import Path

import rtdebug

ctl = Path(sys.argv[1])
print("script started", flush=True)


def work(i):
    return i * 2  # BREAKPOINT: work


i = 0
while not (ctl / "go").exists():
    total = work(i)
    i += 1
    time.sleep(0.01)
stopped = rtdebug.breakpoint(timeout=30)  # BREAKPOINT: api
print(f"breakpoint returned {stopped}", flush=True)
if "--raise" in sys.argv:
    raise ValueError(f"boom after {i} steps")  # RAISE SITE
print("script done", flush=True)
