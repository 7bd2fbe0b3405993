"""One-off A/B experiments, each run as ``bash scripts/bench.sh probes/NAME [--help]``; each module's docstring
names the dated result file it produced (bench/results/). Not maintained as the suite is: a probe that answers
no open question and whose result is recorded is deleted (its code stays in git history)."""
