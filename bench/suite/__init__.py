"""The maintained benchmark, run as ``bash scripts/bench.sh [--quick]`` (``run.py``); type-checked by
``scripts/lint.sh`` and smoke-tested by ``tests/project/test_bench.py`` (``--dry``).

common (paths, stats, ports, environment) and jobs (process control, DAP clients) serve one module per
section: steady (1), launch (2), attach (3), many (4), pythons (5); report and summary write
bench/results/DATE-run.md and the printed table. loop.py and recipe_listen.py are the programs the jobs run.
"""
