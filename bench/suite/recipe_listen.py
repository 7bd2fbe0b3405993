"""The common per-rank recipe the harness replaces: ``debugpy.listen(base + RANK)`` in every rank.

    torchrun ... bench/suite/recipe_listen.py bench/suite/loop.py [loop args]

Base port from RTDEBUG_BENCH_RECIPE_BASE (the recipe usually hard-codes 5678; the
bench uses a free range instead). debugpy.listen() here is stock: it spawns the
adapter subprocess, exactly as the recipe does in users' scripts.
"""

import os
import runpy
import sys

import debugpy

base = int(os.environ.get("RTDEBUG_BENCH_RECIPE_BASE", "5678"))
debugpy.listen(("127.0.0.1", base + int(os.environ.get("RANK", "0"))))
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))  # as `python script` does: the program measured, not an import hack
runpy.run_path(script, run_name="__main__")
