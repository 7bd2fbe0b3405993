"""rtdebug's benchmarks: ``suite/`` (the maintained benchmark behind docs/performance.md) and ``probes/`` (A/B
experiments, each naming the dated result it produced in bench/results/). Run through ``scripts/bench.sh``,
which puts this package and ``tests/support`` on PYTHONPATH."""
