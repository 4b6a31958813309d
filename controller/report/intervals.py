"""Repeats, intervals and verdicts (issue #26): numbers a study can publish.

On a shared machine identical runs differ by 11-24 % (docs/fair-cpu.md), so a single run cannot tell a real
difference from noise. Per setting (the experiments that are repeats of each other), this module gives the
median, min-max, a 95 % bootstrap confidence interval of the mean (``scipy.stats.bootstrap``, percentile
method, a fixed seed so a report is reproducible) and, from 5 repeats, MLPerf's trimmed mean (the fastest and
slowest dropped). Each comparison with the baselines gets the speedup's interval, from resampling both sides,
and a verdict: beyond the noise where the interval excludes 1, within it where it does not, "needs repeats"
where either side has a single run.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import Table

CONFIDENCE = 0.95
RESAMPLES = 4999
SEED = 26  # the number: any fixed seed makes the intervals reproducible
TRIMMED_FROM = 5  # repeats from which MLPerf's trimmed mean is given
METRICS = ("samples_per_second", "time_to_target_seconds", "time_to_accuracy_seconds")
#: the comparisons with the baselines: name -> (the metric, whether larger is faster)
SPEEDUPS = {
    "throughput": ("samples_per_second", True),
    "time_to_target": ("time_to_target_seconds", False),
    "time_to_accuracy": ("time_to_accuracy_seconds", False),
}
SPEEDUP_WORDS = {
    "throughput": "samples/s",
    "time_to_target": "time to target loss",
    "time_to_accuracy": "time to accuracy",
}


def bootstrap_interval(
    samples: Sequence[Sequence[float]], statistic: Callable[..., float]
) -> tuple[float, float] | None:
    """The 95 % percentile-bootstrap interval of ``statistic`` over ``samples`` (each resampled on its own);
    None where a sample has fewer than 2 values or every resample gives the same value.

    >>> low, high = bootstrap_interval([[10.0, 11.0, 12.0, 13.0]], lambda x: sum(x) / len(x))
    >>> 10.0 <= low < 11.5 < high <= 13.0
    True
    >>> bootstrap_interval([[10.0]], lambda x: x[0]) is None
    True
    """
    if any(len(sample) < 2 for sample in samples) or not samples:
        return None
    from scipy.stats import bootstrap

    result = bootstrap(
        tuple(list(sample) for sample in samples),
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=False,
        paired=False,
        rng=SEED,
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (low == low and high == high):  # NaN: a degenerate resample distribution
        return None
    return low, high


def trimmed_mean(values: Sequence[float]) -> float | None:
    """MLPerf's: the fastest and slowest dropped, the rest averaged (from 5 values; None below).

    >>> trimmed_mean([1.0, 2.0, 3.0, 4.0, 100.0])
    3.0
    """
    if len(values) < TRIMMED_FROM:
        return None
    return statistics.fmean(sorted(values)[1:-1])


def _ratio_of_means(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    denominator_mean = statistics.fmean(denominator)
    return statistics.fmean(numerator) / denominator_mean if denominator_mean else math.nan


def verdict(interval: tuple[float, float] | None, words: tuple[str, str] = ("faster", "slower")) -> str:
    """In words, for a ratio's interval: beyond the noise where it excludes 1.

    >>> verdict((1.2, 1.6)), verdict((0.9, 1.3)), verdict(None), verdict((0.5, 0.8), ("higher", "lower"))
    ('faster beyond the noise', 'within the noise', 'needs repeats', 'lower beyond the noise')
    """
    if interval is None:
        return "needs repeats"
    if interval[0] > 1:
        return f"{words[0]} beyond the noise"
    if interval[1] < 1:
        return f"{words[1]} beyond the noise"
    return "within the noise"


def level_against_reference(
    values: Sequence[float], reference: Sequence[float]
) -> dict[str, float | str | None]:
    """A factor level's values against its reference level's: the ratio of the means, its 95 % interval
    (both sides resampled) and the verdict (higher or lower beyond the noise, within it, needs repeats).

    >>> row = level_against_reference([20.0, 21.0, 22.0], [10.0, 10.5, 11.0])
    >>> round(row["ratio"], 2), row["ratio_ci_low"] > 1, row["verdict"]
    (2.0, True, 'higher beyond the noise')
    >>> level_against_reference([20.0], [10.0, 11.0])["verdict"]
    'needs repeats'
    """
    if not values or not reference or not statistics.fmean(reference):
        return {"ratio": None, "ratio_ci_low": None, "ratio_ci_high": None, "verdict": "no data"}
    interval = bootstrap_interval([values, reference], _ratio_of_means)
    return {
        "ratio": _ratio_of_means(values, reference),
        "ratio_ci_low": interval[0] if interval else None,
        "ratio_ci_high": interval[1] if interval else None,
        "verdict": verdict(interval, ("higher", "lower")),
    }


def _values(group: list[Experiment], rows: dict[str, dict[str, Any]], metric: str) -> list[float]:
    return [float(v) for e in group if (v := rows[e.experiment_id].get(metric)) is not None]


def repeats_table(experiments: list[Experiment], rows: dict[str, dict[str, Any]]) -> Table:
    """Per setting: its repeats' samples/s and time to target, median, min-max, interval, trimmed mean."""
    groups: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    for e in experiments:
        groups[e.setting_key()].append(e)
    table = []
    for group in groups.values():
        row: dict[str, Any] = {
            "setting": group[0].label(),
            "strategy": group[0].strategy,
            "repeats": len(group),
        }
        for metric in METRICS:
            values = _values(group, rows, metric)
            interval = bootstrap_interval([values], statistics.fmean)
            row.update(
                {
                    f"{metric}_median": statistics.median(values) if values else None,
                    f"{metric}_min": min(values, default=None),
                    f"{metric}_max": max(values, default=None),
                    f"{metric}_ci_low": interval[0] if interval else None,
                    f"{metric}_ci_high": interval[1] if interval else None,
                    f"{metric}_trimmed_mean": trimmed_mean(values),
                }
            )
        table.append(row)
    columns = ("setting", "strategy", "repeats") + tuple(
        f"{metric}_{part}"
        for metric in METRICS
        for part in ("median", "min", "max", "ci_low", "ci_high", "trimmed_mean")
    )
    title = "Repeats: per setting, median, min-max and a 95 % bootstrap interval of the mean"
    return Table("repeats", title, columns, table)


def comparisons_table(
    experiments: list[Experiment], rows: dict[str, dict[str, Any]], floor: float | None = None
) -> Table:
    """Every non-baseline setting against the baselines it is compared with (same model, data, batch size and
    LR): the throughput and time-to-target speedups (ratios of the means), their intervals and verdicts, and
    whether the throughput speedup is within the noise floor ``floor`` (a share; None: not measured)."""
    baselines: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    settings: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    for e in experiments:
        if e.is_noise_floor:
            continue  # a grid's noise floor is a measurement of the testbed, not a setting of the study
        (baselines[e.comparison_key()] if e.is_baseline else settings[e.setting_key()]).append(e)
    table = []
    for group in settings.values():
        base = baselines.get(group[0].comparison_key(), [])
        if not base:
            continue
        row: dict[str, Any] = {
            "setting": group[0].label(),
            "repeats": len(group),
            "baseline_repeats": len(base),
            "setting_key": group[0].setting_key(),  # not a column: the diagnosis finds its setting by it
        }
        for name, (metric, larger_is_faster) in SPEEDUPS.items():
            # a speedup > 1 is faster: samples/s over the baselines', the baselines' time over this setting's
            ours, theirs = _values(group, rows, metric), _values(base, rows, metric)
            numerator, denominator = (ours, theirs) if larger_is_faster else (theirs, ours)
            point = _ratio_of_means(numerator, denominator) if numerator and denominator else None
            point = None if point is None or math.isnan(point) else point
            interval = bootstrap_interval([numerator, denominator], _ratio_of_means)
            row.update(
                {
                    f"{name}_speedup": point,
                    f"{name}_ci_low": interval[0] if interval else None,
                    f"{name}_ci_high": interval[1] if interval else None,
                    f"{name}_verdict": verdict(interval) if point is not None else "no data",
                }
            )
        row["within_noise_floor"] = within_noise_floor(row["throughput_speedup"], floor)
        table.append(row)
    columns = ("setting", "repeats", "baseline_repeats") + tuple(
        f"{name}_{part}" for name in SPEEDUPS for part in ("speedup", "ci_low", "ci_high", "verdict")
    )
    columns += ("within_noise_floor",)
    title = "Against the baselines: speedups with 95 % intervals (both sides resampled) and verdicts"
    return Table("comparisons", title, columns, table)


def noise_floor_table(experiments: list[Experiment], peers: Table) -> Table:
    """The testbed's noise floor: every `solo` run (identical loops in identical containers, no communication;
    `trainer grid` runs one first) with its peers' samples/s and how far apart they landed (max / min - 1)."""
    rates: dict[str, list[float]] = defaultdict(list)
    for row in peers.rows:
        if row.get("samples_per_second"):
            rates[row["experiment_id"]].append(float(row["samples_per_second"]))
    table = []
    for e in experiments:
        values = rates.get(e.experiment_id, [])
        if e.strategy != "solo" or len(values) < 2:
            continue
        table.append(
            {
                "experiment_id": e.experiment_id,
                "peers": len(values),
                "vcpus": e.settings.get("vcpus"),
                "samples_per_second_min": min(values),
                "samples_per_second_median": statistics.median(values),
                "samples_per_second_max": max(values),
                "spread": max(values) / min(values) - 1,
            }
        )
    columns = ("experiment_id", "peers", "vcpus", "samples_per_second_min", "samples_per_second_median")
    columns += ("samples_per_second_max", "spread")
    title = "The testbed's noise floor: identical loops in identical containers (solo runs)"
    return Table("noise_floor", title, columns, table)


def noise_floor(table: Table) -> float | None:
    """The largest spread of the solo runs (None: none ran)."""
    return max((row["spread"] for row in table.rows), default=None)


def within_noise_floor(speedup: float | None, floor: float | None) -> bool | None:
    """Whether a ratio is no further from 1 than the noise floor (either way).

    >>> within_noise_floor(1.1, 0.13), within_noise_floor(0.85, 0.13), within_noise_floor(1.1, None)
    (True, False, None)
    """
    if speedup is None or floor is None or speedup <= 0:
        return None
    return max(speedup, 1 / speedup) - 1 <= floor


def noise_floor_lines(table: Table) -> list[str]:
    """The report's first lines: the noise floor measured, or how to get it."""
    floor = noise_floor(table)
    if floor is None:
        return [
            "Noise floor: not measured (no `solo` run here; `trainer grid` runs one first unless the grid "
            "says `noise_floor: false`). Differences below 11-24 % may be this machine's noise "
            "(docs/fair-cpu.md)."
        ]
    worst = max(table.rows, key=lambda row: row["spread"])
    return [
        f"Noise floor: {floor:.0%}. Identical training loops in {worst['peers']} identical containers, "
        f"no communication (`{worst['experiment_id']}`), trained "
        f"{worst['samples_per_second_min']:.4g}-{worst['samples_per_second_max']:.4g} samples/s each. "
        "A speedup closer to 1 than that is within this testbed's noise, whatever its interval says "
        "(`noise_floor.csv`; `within_noise_floor` in `comparisons.csv`)."
    ]


def verdict_lines(comparisons: Table, repeats: Table) -> list[str]:
    """The report's sentences: one per comparison, and what to do when nothing was repeated."""
    lines = []
    if repeats.rows and all(row["repeats"] < 2 for row in repeats.rows):
        lines.append(
            "Intervals need repeats: every setting here ran once (a grid block's `repeats:`, or "
            "`trainer grid --repeat N`); the speedups below are single ratios of noisy numbers."
        )
    if not comparisons.rows:
        lines.append("No comparison: no baseline shares a setting's model, data, batch size and LR.")
    for row in comparisons.rows:
        for name, words in SPEEDUP_WORDS.items():
            if row[f"{name}_speedup"] is not None:
                floor = (
                    " It is within the testbed's noise floor."
                    if name == "throughput" and row["within_noise_floor"]
                    else ""
                )
                lines.append(
                    f"{row['setting']} against its baselines, {words}: {speedup_words(row, name)} "
                    f"({row['repeats']} vs {row['baseline_repeats']} runs).{floor}"
                )
    return lines


def speedup_words(row: dict[str, Any], name: str) -> str:
    """One speedup of a comparisons row in words: "1.51x (95 % interval 1.40-1.62), faster beyond the
    noise"."""
    interval = (
        f" (95 % interval {row[f'{name}_ci_low']:.2f}-{row[f'{name}_ci_high']:.2f})"
        if row[f"{name}_ci_low"] is not None
        else ""
    )
    return f"{row[f'{name}_speedup']:.2f}x{interval}, {row[f'{name}_verdict']}"


def against_baselines(row: dict[str, Any] | None) -> str:
    """The diagnosis's column: every speedup of a setting's comparisons row, in words."""
    if row is None:
        return "no baselines to compare with"
    parts = [
        f"{words} {speedup_words(row, name)}"
        for name, words in SPEEDUP_WORDS.items()
        if row[f"{name}_speedup"] is not None
    ]
    return "; ".join(parts) or "no data"
