"""The report's intervals hold at the runs a testbed has: a seeded, smaller version of
benchmarks/interval_coverage.py, with a tolerance for its fewer draws."""

from __future__ import annotations

import math

from benchmarks.interval_coverage import COVERAGE_GOAL, FALSE_VERDICT_LIMIT, RUNS, cell, table
from controller.report.intervals import MIN_RUNS, ratio_interval

DRAWS = 800
#: two standard errors of a share near 95 % (or 5 %) measured from DRAWS draws
TOLERANCE = 2 * math.sqrt(0.95 * 0.05 / DRAWS)


def test_the_report_interval_covers_and_rarely_calls_noise_a_difference_from_min_runs():
    cells = [c for c in table(DRAWS, seed=7, methods=("welch",)) if c.runs >= MIN_RUNS]
    assert len(cells) == 2 * 3 * len([n for n in RUNS if n >= MIN_RUNS])
    for c in cells:
        assert c.given == 1.0, c  # continuous draws: the report gives an interval for every one
        assert c.coverage >= COVERAGE_GOAL - TOLERANCE, c
        assert c.false_verdicts <= FALSE_VERDICT_LIMIT + TOLERANCE, c


def test_the_percentile_bootstrap_fails_the_same_check_at_two_runs():
    """The check can fail: the percentile bootstrap of the ratio of means misses the goal where the table
    says."""
    bootstrap = cell("log-normal", 0.15, 2, "bootstrap", DRAWS, seed=7)
    assert (
        bootstrap.coverage < COVERAGE_GOAL - TOLERANCE
        and bootstrap.false_verdicts > FALSE_VERDICT_LIMIT + TOLERANCE
    ), bootstrap


def test_below_min_runs_there_is_no_interval():
    assert ratio_interval([1.0] * (MIN_RUNS - 1) or [1.0], [1.0, 1.1]) is None
