"""The bench's verdicts: "met" only when the whole interval of the median clears the goal.

A verdict is the one line a reader takes from a bench file, so its decision is tested
here on numbers whose answer is known, not on a bench run.
"""

from __future__ import annotations

import random

import pytest

from bench.probes.ray_bench import PAIRS, ratios, verdict
from bench.suite.common import median_ci


def _around(centre: float, spread: float, n: int = 60) -> list[float]:
    rng = random.Random(1)
    return [centre + rng.uniform(-spread, spread) for _ in range(n)]


def test_median_ci_needs_five_and_brackets_the_median():
    assert median_ci([1.0, 1.0, 1.0, 1.0]) is None
    xs = _around(1.0, 0.05)
    lo, hi = median_ci(xs)
    assert lo < sorted(xs)[len(xs) // 2] < hi
    assert hi - lo < 0.05  # the median is known far better than one sample


@pytest.mark.parametrize(
    ("centre", "spread", "want"),
    [(1.02, 0.01, "met"), (0.95, 0.01, "not met"), (0.99, 0.08, "not resolved")],
)
def test_verdict_higher_is_better(centre, spread, want):
    assert verdict(_around(centre, spread), 0.99, higher_is_better=True) == want


@pytest.mark.parametrize(
    ("centre", "spread", "want"),
    [(0.99, 0.01, "met"), (1.06, 0.01, "not met"), (1.01, 0.08, "not resolved")],
)
def test_verdict_lower_is_better(centre, spread, want):
    assert verdict(_around(centre, spread), 1.01, higher_is_better=False) == want


def test_verdict_is_not_met_while_identical_jobs_differ():
    clear = _around(1.02, 0.01)
    assert verdict(clear, 0.99, higher_is_better=True, aa=_around(1.0, 0.02)) == "met"
    off = verdict(clear, 0.99, higher_is_better=True, aa=_around(1.06, 0.02))
    assert off == "not resolved: identical jobs differ (A/A interval excludes 1)"


def test_verdict_says_when_there_are_too_few_samples():
    assert verdict([1.0, 1.0], 0.99, higher_is_better=True) == "not resolved (n < 5)"


def _cycle(rates: dict[tuple[str, str], tuple[float, float]]) -> list[dict]:
    return [{"pair": list(pair), "steps_per_s": dict(zip(pair, rates[pair], strict=True))} for pair in PAIRS]


def test_ratios_compare_jobs_of_the_same_turn_and_cancel_the_core():
    # core 0 is twice as fast as core 1; the harness job is 10 % slower than either plain job
    rates = {p: (200.0, 100.0) for p in PAIRS}
    for p in PAIRS:
        if p[0] == "harness":
            rates[p] = (180.0, 100.0)
        elif p[1] == "harness":
            rates[p] = (200.0, 90.0)
    h, aa = ratios([{"windows": _cycle(rates) * 2}], "steps_per_s")
    assert h == pytest.approx([0.9, 0.9])
    assert aa == pytest.approx([1.0, 1.0])  # B|A and A|B on swapped cores: the core cancels


def test_rtdebug_cpu_counts_a_busy_rtdebug_thread():
    """The bench's bound on a ready worker's cost reads 0 in practice: it must be able to read more."""
    import threading
    import time

    from bench.probes.ray_job import rtdebug_cpu

    from support.wait import until

    before, n0 = rtdebug_cpu()
    stop = threading.Event()

    def spin():
        end = time.thread_time() + 60  # busy until read (a bound, should the test fail before stop is set)
        while time.thread_time() < end and not stop.is_set():
            pass

    t = threading.Thread(target=spin, name="rtdebug-test-spin")
    t.start()
    try:
        during, n = until(
            rtdebug_cpu, 30, "the busy rtdebug thread counted with its CPU", ok=lambda v: v[0] - before > 0.01
        )
    finally:
        stop.set()
        t.join()
    assert n == n0 + 1
    assert during - before > 0.01
