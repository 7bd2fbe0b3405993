"""rtdebug's benchmark against plain torchrun, run as ``.venv/bin/python bench/run.py [--quick]``.

common (paths, stats, ports, environment) and jobs (process control, DAP clients) serve one module per
section: steady (1), launch (2), attach (3), many (4), pythons (5); report and summary write bench/results/DATE-run.md
and the printed table. loop.py and recipe_listen.py are the programs the jobs run.
"""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for _p in (str(_ROOT / "tests"), str(_ROOT)):  # the tests' real DAP client (support/dap.py); the harness
    if _p not in sys.path:
        sys.path.insert(0, _p)
