"""The headline family: the comparisons a grid named before its runs (its ``headline``), corrected for
multiplicity; every other comparison of the report is exploratory.

For each comparison and metric (samples/s; the time to the headline's loss target and accuracy target) the
table gives the ratio of the two sides' geometric means, Welch's 95 % interval of it (controller/report/
intervals.py), Welch's two-sided p-value on the logarithms, and the p-value Holm's step-down method adjusts
over the whole family (every comparison x metric that has a p-value): a verdict holds at a family-wise error
of 5 % where the adjusted p-value is below 0.05. Beside it, MLPerf's reading where both sides have 5 runs or
more: the fastest and slowest of each side dropped and the rest averaged, their ratio. A time to target that
a run never reached is left out of its side, and the row says how many reached it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.grid.spec import Grid, GridError, load_grid, matching_runs
from controller.report.data import Experiment
from controller.report.intervals import MIN_RUNS, geometric_ratio, ratio_interval, trimmed_mean
from controller.report.metrics import Table, time_to_accuracy, time_to_target, wall_seconds

#: an edition's grid kept beside its results (the grid as they ran it)
FROZEN_GRID = "grid.yml"
#: the family-wise error the adjusted p-values are held to
FAMILY_ERROR = 0.05
HEADLINE_COLUMNS = (
    *("comparison", "metric", "runs", "against", "ratio", "ci_low", "ci_high", "p_value", "p_holm"),
    *("verdict", "mlperf_ratio"),
)


def welch_p(numerator: Sequence[float], denominator: Sequence[float]) -> float | None:
    """Welch's two-sided p-value for equal geometric means (a t-test on the logarithms); None below MIN_RUNS
    a side or without spread.

    >>> round(welch_p([150.0, 155.0, 148.0], [100.0, 102.0, 98.0]), 6) < 0.001
    True
    >>> welch_p([1.0], [1.0, 2.0]) is None
    True
    """
    from scipy.stats import t

    if len(numerator) < MIN_RUNS or len(denominator) < MIN_RUNS:
        return None
    if min(numerator) <= 0 or min(denominator) <= 0:
        return None
    top, bottom = [math.log(v) for v in numerator], [math.log(v) for v in denominator]
    a, b = statistics.variance(top) / len(top), statistics.variance(bottom) / len(bottom)
    if not a + b:
        return None
    df = (a + b) ** 2 / ((a * a / (len(top) - 1) if a else 0.0) + (b * b / (len(bottom) - 1) if b else 0.0))
    statistic = (statistics.fmean(top) - statistics.fmean(bottom)) / math.sqrt(a + b)
    return float(2 * t.sf(abs(statistic), df))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family's p-values (None stays None and is not counted).

    >>> holm([0.01, 0.04, None, 0.03])
    [0.03, 0.06, None, 0.06]
    """
    ranked = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[index] = round(running, 12)
    return adjusted


def headline_table(
    grid: Grid | None, experiments: list[Experiment], curves: dict[str, tuple[list[float], list[float]]]
) -> Table | None:
    """The headline family of ``grid`` over the complete ``experiments`` (None: the grid names none)."""
    if grid is None or grid.headline is None:
        return None
    headline = grid.headline
    by_id = {e.experiment_id: e for e in experiments if e.complete}

    def side(expression: str) -> list[Experiment]:
        return [
            by_id[run.experiment_id]
            for run in matching_runs(grid.runs, expression)
            if run.experiment_id in by_id
        ]

    metrics: list[tuple[str, Any, bool]] = [
        ("samples/s", lambda e: _throughput(e), True),
        (
            f"time to loss {headline.loss_target:g}",
            lambda e: time_to_target(curves[e.experiment_id], headline.loss_target),
            False,
        ),
    ]
    if headline.accuracy_target is not None:
        metrics.append(
            (
                f"time to accuracy {headline.accuracy_target:g}",
                lambda e: time_to_accuracy(e, headline.accuracy_target),
                False,
            )
        )
    rows: list[dict[str, Any]] = []
    for comparison in headline.comparisons:
        runs, against = side(comparison.runs), side(comparison.against)
        for name, measure, higher_is_better in metrics:
            top = [v for v in (measure(e) for e in runs) if v]
            bottom = [v for v in (measure(e) for e in against) if v]
            # a speedup: for a time, the other side's over this one's
            numerator, denominator = (top, bottom) if higher_is_better else (bottom, top)
            interval = ratio_interval(numerator, denominator)
            trimmed = [trimmed_mean(numerator), trimmed_mean(denominator)]
            rows.append(
                {
                    "comparison": comparison.name,
                    "metric": name,
                    "runs": f"{len(top)} of {len(runs)}",
                    "against": f"{len(bottom)} of {len(against)}",
                    "ratio": geometric_ratio(numerator, denominator),
                    "ci_low": interval[0] if interval else None,
                    "ci_high": interval[1] if interval else None,
                    "p_value": welch_p(numerator, denominator),
                    "mlperf_ratio": trimmed[0] / trimmed[1] if None not in trimmed and trimmed[1] else None,
                }
            )
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows]), strict=True):
        row["p_holm"] = adjusted
        row["verdict"] = _verdict(row)
    tests = sum(row["p_holm"] is not None for row in rows)
    title = (
        f"Headline comparisons (named in {grid.path.name} before the runs; Holm over {tests} tests, "
        f"family-wise error {FAMILY_ERROR:.0%}; a ratio above 1: the first side faster)"
    )
    return Table("headline", title, HEADLINE_COLUMNS, rows)


def _throughput(e: Experiment) -> float | None:
    """All peers' samples over the run's wall time (on the training clock), as experiments.csv's."""
    wall = wall_seconds(e)
    return (
        sum(float(row.get("samples") or 0) for peer in e.peers for row in peer.steps) / wall if wall else None
    )


def grid_of(results_dir: Path) -> Grid | None:
    """The grid the results in ``results_dir`` ran: its ``grid.yml`` where one was kept beside them (an
    edition's grid frozen with its runs, as studies/thesis's), else the one its status file names (``trainer
    grid`` writes one); None: neither, or the grid unreadable (then the report has no headline family)."""
    frozen = results_dir / FROZEN_GRID
    if frozen.is_file():
        try:
            return load_grid(frozen)
        except GridError:
            return None
    for status in sorted(results_dir.glob("grid-*.status.json")):
        try:
            named = json.loads(status.read_text()).get("grid_file")
            return load_grid(Path(named)) if named else None
        except (OSError, ValueError, GridError):
            return None
    return None


def _verdict(row: dict[str, Any]) -> str:
    if row["p_holm"] is None:
        return f"needs runs: {row['runs']} against {row['against']}"
    if row["p_holm"] >= FAMILY_ERROR:
        return "not decided (Holm)"
    return "faster (Holm)" if row["ratio"] > 1 else "slower (Holm)"
