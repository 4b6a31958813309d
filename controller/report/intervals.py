"""Repeats, intervals and verdicts: numbers a study can publish.

A testbed has few runs per setting (2-5), so the method is chosen for small samples (docs/statistics.md,
with the Monte Carlo table that checks it, ``benchmarks/interval_coverage.py``):

- **a setting's mean**: Student's t-interval (``mean_interval``);
- **a ratio of two settings** (a speedup, a factor level against its reference): Welch's t-interval on the
  logarithms of the run values, exponentiated (``ratio_interval``). Its point is the ratio of the geometric
  means. A rate or a time of a run is positive and its noise multiplicative, so the logarithm makes it
  close to normal, and Welch's degrees of freedom pay for the few runs. The percentile bootstrap this
  replaced gave [min, max] from 2 values and covered a true ratio far less than 95 % of the time at 2-3 runs;
- a **verdict** (beyond the noise) only where the interval excludes 1 and both sides have ``MIN_RUNS`` runs
  (the fewest at which the Monte Carlo check shows the interval holds); otherwise the range and how many
  runs a verdict needs (``runs_needed``);
- **times to a target** that some run never reached (censored): no ratio and no interval, "k of n reached",
  and a verdict only where the data decide it without knowing the missing times (``censored_verdict``).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import Table

CONFIDENCE = 0.95
#: the fewest runs a side from which the intervals below hold their 95 % (the Monte Carlo table in
#: docs/statistics.md: Welch's t on logarithms covers >= 93 % and calls "beyond the noise" <= 5 % of the
#: time at no difference from n = 2 a side, for normal and log-normal runs with 5-25 % variation)
MIN_RUNS = 2
#: the power ``runs_needed`` plans for: the chance that a verdict comes when the observed ratio is real
POWER = 0.8
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
#: the time metrics a run may never reach: the run's end is then all that is known (censored)
CENSORED = {"time_to_target_seconds", "time_to_accuracy_seconds"}


def _t_quantile(df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + CONFIDENCE / 2, df))


def mean_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % Student t-interval of the mean, its low end at least 0 (every metric here is a rate or a
    time); None below MIN_RUNS values or where they are all equal.

    >>> low, high = mean_interval([10.0, 11.0, 12.0, 13.0])
    >>> round(low, 2), round(high, 2)
    (9.45, 13.55)
    >>> mean_interval([10.0]) is None, mean_interval([5.0, 5.0]) is None
    (True, True)
    """
    if len(values) < MIN_RUNS:
        return None
    spread = statistics.stdev(values)
    if not spread:
        return None
    half = _t_quantile(len(values) - 1) * spread / math.sqrt(len(values))
    mean = statistics.fmean(values)
    return max(0.0, mean - half), mean + half


def _logs(values: Sequence[float]) -> list[float] | None:
    return [math.log(v) for v in values] if values and all(v > 0 for v in values) else None


def geometric_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float | None:
    """The ratio of the geometric means (None: a side empty or not positive).

    >>> geometric_ratio([2.0, 8.0], [2.0])
    2.0
    """
    top, bottom = _logs(numerator), _logs(denominator)
    if top is None or bottom is None:
        return None
    return math.exp(statistics.fmean(top) - statistics.fmean(bottom))


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % interval of the ratio of the two sides' geometric means: Welch's t-interval of the
    difference of their mean logarithms, exponentiated. None below MIN_RUNS a side, for values that are not
    positive, or where neither side varies.

    >>> low, high = ratio_interval([150.0, 155.0, 148.0], [100.0, 102.0, 98.0])
    >>> 1.4 < low < 1.51 < high < 1.6
    True
    >>> ratio_interval([150.0], [100.0, 101.0]) is None
    True
    """
    if len(numerator) < MIN_RUNS or len(denominator) < MIN_RUNS:
        return None
    top, bottom = _logs(numerator), _logs(denominator)
    if top is None or bottom is None:
        return None
    a, b = statistics.variance(top) / len(top), statistics.variance(bottom) / len(bottom)
    if not a + b:
        return None
    # Welch-Satterthwaite; a side without spread contributes no degrees of freedom
    df = (a + b) ** 2 / ((a * a / (len(top) - 1) if a else 0.0) + (b * b / (len(bottom) - 1) if b else 0.0))
    centre = statistics.fmean(top) - statistics.fmean(bottom)
    half = _t_quantile(df) * math.sqrt(a + b)
    return math.exp(centre - half), math.exp(centre + half)


def paired_ratio_interval(ratios: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % t-interval of the geometric mean of per-run ratios (each run its own control: a part of it
    against the rest), on their logarithms; None below MIN_RUNS ratios or where they are all equal.

    >>> low, high = paired_ratio_interval([0.5, 0.55, 0.6])
    >>> round(low, 2), round(high, 2)
    (0.44, 0.69)
    >>> paired_ratio_interval([0.5]) is None
    True
    """
    logs = _logs(ratios)
    if logs is None or len(logs) < MIN_RUNS or not statistics.stdev(logs):
        return None
    half = _t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return math.exp(mean - half), math.exp(mean + half)


def runs_needed(numerator: Sequence[float], denominator: Sequence[float], most: int = 1000) -> int | None:
    """About how many runs a side a verdict on a ratio this large needs: the fewest n at which a two-sided
    5 % t-test of the difference of mean logarithms, with the two sides' pooled spread, has POWER (80 %)
    against the difference measured: (t(2n-2, 0.975) + t(2n-2, POWER)) · s · sqrt(2 / n) <= |d|, and more
    than the runs either side has (they did not decide it). None: no spread or no difference measured (or
    more than ``most``).

    >>> runs_needed([110.0, 100.0, 120.0], [100.0, 90.0, 110.0])
    17
    >>> runs_needed([8.5, 12.3], [42.4, 76.2])  # 2 vs 2 did not decide 5.6x; 3 a side would, 4 times in 5
    3
    """
    top, bottom = _logs(numerator), _logs(denominator)
    if top is None or bottom is None:
        return None
    spreads = [statistics.variance(side) for side in (top, bottom) if len(side) >= 2]
    difference = abs(statistics.fmean(top) - statistics.fmean(bottom))
    if not spreads or not difference or not statistics.fmean(spreads):
        return None
    from scipy.stats import t

    spread = math.sqrt(statistics.fmean(spreads))
    for n in range(max(MIN_RUNS, min(len(top), len(bottom)) + 1), most + 1):
        df = 2 * n - 2
        if (t.ppf(0.5 + CONFIDENCE / 2, df) + t.ppf(POWER, df)) * spread * math.sqrt(2 / n) <= difference:
            return n
    return None


def trimmed_mean(values: Sequence[float]) -> float | None:
    """MLPerf's: the fastest and slowest dropped, the rest averaged (from 5 values; None below).

    >>> trimmed_mean([1.0, 2.0, 3.0, 4.0, 100.0])
    3.0
    """
    if len(values) < TRIMMED_FROM:
        return None
    return statistics.fmean(sorted(values)[1:-1])


def verdict(interval: tuple[float, float] | None, words: tuple[str, str] = ("faster", "slower")) -> str:
    """In words, for a ratio's interval: beyond the noise where it excludes 1.

    >>> verdict((1.2, 1.6)), verdict((0.9, 1.3)), verdict(None), verdict((0.5, 0.8), ("higher", "lower"))
    ('faster beyond the noise', 'within the noise', 'needs 2 runs a side', 'lower beyond the noise')
    """
    if interval is None:
        return f"needs {MIN_RUNS} runs a side"
    if interval[0] > 1:
        return f"{words[0]} beyond the noise"
    if interval[1] < 1:
        return f"{words[1]} beyond the noise"
    return "within the noise"


def censored_verdict(
    ours: Sequence[float | None],
    ours_ends: Sequence[float],
    theirs: Sequence[float | None],
    theirs_ends: Sequence[float],
    words: tuple[str, str] = ("faster", "slower"),
) -> str:
    """Times to a target where some run never reached it (None; its ``*_ends`` is how long it ran): a
    verdict only where the data decide it whatever the missing times are. One side decides when every one
    of its runs reached the target before any run of the other reached it or ended, and so few orderings of
    the runs give that separation that chance is below 5 % (two-sided: 2 / C(n + m, n), from 4 vs 4 runs).

    >>> censored_verdict([10.0, 11.0, 12.0, 10.5], [20] * 4, [None] * 4, [30.0] * 4)
    'faster beyond the noise (4 of 4 vs 0 of 4 reached)'
    >>> censored_verdict([10.0, None], [20, 20], [None, 15.0], [30, 30])
    'undecided: 1 of 2 vs 1 of 2 reached'
    """
    counts = (sum(t is not None for t in ours), len(ours), sum(t is not None for t in theirs), len(theirs))
    reached = "{} of {} vs {} of {} reached".format(*counts)
    chance = 2 / math.comb(len(ours) + len(theirs), len(ours)) if ours and theirs else 1.0

    def first(a: Sequence[float | None], b: Sequence[float | None], b_ends: Sequence[float]) -> bool:
        """Every run of ``a`` reached the target before any run of ``b`` reached it or ended."""
        if not a or any(t is None for t in a):
            return False
        latest = max(float(t) for t in a if t is not None)
        return all((t if t is not None else end) > latest for t, end in zip(b, b_ends, strict=True))

    if chance <= 1 - CONFIDENCE:
        if first(ours, theirs, theirs_ends):
            return f"{words[0]} beyond the noise ({reached})"
        if first(theirs, ours, ours_ends):
            return f"{words[1]} beyond the noise ({reached})"
    return f"undecided: {reached}"


def level_against_reference(
    values: Sequence[float], reference: Sequence[float]
) -> dict[str, float | str | None]:
    """A factor level's values against its reference level's: the ratio of the geometric means, its 95 %
    interval (``ratio_interval``) and the verdict (higher or lower beyond the noise, within it, needs runs).

    >>> row = level_against_reference([20.0, 21.0, 22.0], [10.0, 10.5, 11.0])
    >>> round(row["ratio"], 2), row["ratio_ci_low"] > 1, row["verdict"]
    (2.0, True, 'higher beyond the noise')
    >>> level_against_reference([20.0], [10.0, 11.0])["verdict"]
    'needs 2 runs a side'
    """
    ratio = geometric_ratio(values, reference)
    if ratio is None:
        return {"ratio": None, "ratio_ci_low": None, "ratio_ci_high": None, "verdict": "no data"}
    interval = ratio_interval(values, reference)
    return {
        "ratio": ratio,
        "ratio_ci_low": interval[0] if interval else None,
        "ratio_ci_high": interval[1] if interval else None,
        "verdict": verdict(interval, ("higher", "lower")),
    }


def _values(group: list[Experiment], rows: dict[str, dict[str, Any]], metric: str) -> list[float]:
    return [float(v) for e in group if (v := rows[e.experiment_id].get(metric)) is not None]


def repeats_table(experiments: list[Experiment], rows: dict[str, dict[str, Any]]) -> Table:
    """Per setting: its repeats' samples/s and times to target, median, min-max, the t-interval of the mean,
    the trimmed mean; for the times, how many runs reached the target (the others are not in the numbers)."""
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
            # a censored metric gets an interval only where every run reached the target
            interval = mean_interval(values) if len(values) == len(group) else None
            row.update(
                {
                    f"{metric}_median": statistics.median(values) if values else None,
                    f"{metric}_min": min(values, default=None),
                    f"{metric}_max": max(values, default=None),
                    f"{metric}_ci_low": interval[0] if interval else None,
                    f"{metric}_ci_high": interval[1] if interval else None,
                    f"{metric}_trimmed_mean": trimmed_mean(values) if len(values) == len(group) else None,
                }
            )
            if metric in CENSORED:
                row[f"{metric}_reached"] = len(values)
        table.append(row)
    columns: tuple[str, ...] = ("setting", "strategy", "repeats")
    for metric in METRICS:
        columns += tuple(
            f"{metric}_{part}" for part in ("median", "min", "max", "ci_low", "ci_high", "trimmed_mean")
        )
        columns += (f"{metric}_reached",) if metric in CENSORED else ()
    title = (
        "Repeats: per setting, median, min-max and a 95 % t-interval of the mean (times: of the runs that "
        "reached the target, an interval only where all did)"
    )
    return Table("repeats", title, columns, table)


def _ends(group: list[Experiment], rows: dict[str, dict[str, Any]]) -> list[float]:
    return [float(rows[e.experiment_id].get("wall_seconds") or 0.0) for e in group]


def comparisons_table(
    experiments: list[Experiment], rows: dict[str, dict[str, Any]], floor: float | None = None
) -> Table:
    """Every non-baseline setting against the baselines it is compared with (same model, data, batch size and
    LR): the throughput and time speedups (ratios of geometric means), their intervals, verdicts and the runs
    a verdict needs, and whether the throughput speedup is within the noise floor ``floor`` (a share; None:
    not measured). A time some run never reached gives no ratio: how many reached, and a verdict only where
    the data decide (``censored_verdict``)."""
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
            censored = metric in CENSORED and (len(ours) < len(group) or len(theirs) < len(base))
            point = None if censored else geometric_ratio(numerator, denominator)
            interval = None if point is None else ratio_interval(numerator, denominator)
            if censored and (ours or theirs):
                times = [rows[e.experiment_id].get(metric) for e in group]
                base_times = [rows[e.experiment_id].get(metric) for e in base]
                words = censored_verdict(times, _ends(group, rows), base_times, _ends(base, rows))
            elif point is None:
                words = "no data"
            else:
                words = verdict(interval)
            needed = None
            if interval is not None and interval[0] <= 1 <= interval[1]:
                needed = runs_needed(numerator, denominator)
            row.update(
                {
                    f"{name}_speedup": point,
                    f"{name}_ci_low": interval[0] if interval else None,
                    f"{name}_ci_high": interval[1] if interval else None,
                    f"{name}_verdict": words,
                    f"{name}_runs_needed": needed,
                }
            )
            if metric in CENSORED:
                row[f"{name}_reached"] = f"{len(ours)}/{len(group)} vs {len(theirs)}/{len(base)}"
        row["within_noise_floor"] = within_noise_floor(row["throughput_speedup"], floor)
        table.append(row)
    columns: tuple[str, ...] = ("setting", "repeats", "baseline_repeats")
    for name, (metric, _) in SPEEDUPS.items():
        columns += tuple(
            f"{name}_{part}" for part in ("speedup", "ci_low", "ci_high", "verdict", "runs_needed")
        )
        columns += (f"{name}_reached",) if metric in CENSORED else ()
    columns += ("within_noise_floor",)
    title = (
        "Against the baselines: speedups (ratios of geometric means) with 95 % Welch intervals on "
        "logarithms, verdicts and the runs a side a verdict would need"
    )
    return Table("comparisons", title, columns, table)


def noise_floor_table(experiments: list[Experiment], rows: dict[str, dict[str, Any]], peers: Table) -> Table:
    """The testbed's noise floor, per `solo` setting (identical loops in identical containers, no
    communication; `trainer grid` runs them first): how far apart two identical runs' samples/s land 95 % of
    the time, from the spread of its repeats' run-level samples/s (the quantity the comparisons use):
    ``floor`` = exp(1.96 · sqrt(2) · s) - 1, s the standard deviation of their logarithms, with a 95 %
    interval from s's chi-square interval. A setting of one run gives no floor; its peers' spread (max / min
    - 1 of their samples/s, one run's scheduling) is shown beside."""
    from scipy.stats import chi2, norm

    peer_rates: dict[str, list[float]] = defaultdict(list)
    for row in peers.rows:
        if row.get("samples_per_second"):
            peer_rates[row["experiment_id"]].append(float(row["samples_per_second"]))
    groups: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    for e in experiments:
        if e.strategy == "solo":
            groups[e.setting_key()].append(e)
    z = norm.ppf(0.5 + CONFIDENCE / 2) * math.sqrt(2)
    table = []
    for group in groups.values():
        rates = [r for r in _values(group, rows, "samples_per_second") if r > 0]
        peer_spreads = [
            max(v) / min(v) - 1 for e in group if len(v := peer_rates.get(e.experiment_id, [])) >= 2
        ]
        row: dict[str, Any] = {
            "setting": group[0].label(),
            "runs": len(rates),
            "experiment_ids": " ".join(e.experiment_id for e in group),
            "vcpus": group[0].settings.get("vcpus"),
            "samples_per_second_min": min(rates, default=None),
            "samples_per_second_max": max(rates, default=None),
            "floor": None,
            "floor_ci_low": None,
            "floor_ci_high": None,
            "peer_spread": max(peer_spreads, default=None),
        }
        if len(rates) >= 2:
            spread = statistics.stdev(math.log(r) for r in rates)
            df = len(rates) - 1
            low, high = (
                spread * math.sqrt(df / chi2.ppf(q, df)) for q in (0.5 + CONFIDENCE / 2, 0.5 - CONFIDENCE / 2)
            )
            row.update(
                floor=math.exp(z * spread) - 1,
                floor_ci_low=math.exp(z * low) - 1,
                floor_ci_high=math.exp(z * high) - 1,
            )
        table.append(row)
    columns = (
        "setting",
        "runs",
        "experiment_ids",
        "vcpus",
        "samples_per_second_min",
        "samples_per_second_max",
    )
    columns += ("floor", "floor_ci_low", "floor_ci_high", "peer_spread")
    title = "The testbed's noise floor: how far apart identical runs land (repeated solo runs' samples/s)"
    return Table("noise_floor", title, columns, table)


def noise_floor(table: Table) -> float | None:
    """The largest floor of the solo settings with repeats (None: none measured)."""
    return max((row["floor"] for row in table.rows if row["floor"] is not None), default=None)


def within_noise_floor(speedup: float | None, floor: float | None) -> bool | None:
    """Whether a ratio is no further from 1 than the noise floor (either way).

    >>> within_noise_floor(1.1, 0.13), within_noise_floor(0.85, 0.13), within_noise_floor(1.1, None)
    (True, False, None)
    """
    if speedup is None or floor is None or speedup <= 0:
        return None
    return max(speedup, 1 / speedup) - 1 <= floor


def noise_floor_lines(table: Table) -> list[str]:
    """The report's first lines: the noise floor measured, or what it needs."""
    floor = noise_floor(table)
    if floor is None:
        single = [row for row in table.rows if row["runs"] == 1]
        seen = (
            f" (one solo run here: its {single[0]['peer_spread']:.0%} between peers is one run's scheduling, "
            "not the spread between runs)"
            if single and single[0]["peer_spread"] is not None
            else ""
        )
        return [
            f"Noise floor: not measured: it needs {MIN_RUNS} or more `solo` runs of one setting{seen}. "
            "`trainer grid` runs them first unless the grid says `noise_floor: false`."
        ]
    worst = max((row for row in table.rows if row["floor"] is not None), key=lambda row: row["floor"])
    return [
        f"Noise floor: {floor:.0%} (95 % interval {_share(worst['floor_ci_low'])}-"
        f"{_share(worst['floor_ci_high'])}, from {worst['runs']} runs): "
        "two identical runs' samples/s land within that of each other 95 % of the time, from "
        f"the solo runs of `{worst['setting']}` ({worst['samples_per_second_min']:.4g}-"
        f"{worst['samples_per_second_max']:.4g} samples/s). A speedup closer to 1 than that is within this "
        "testbed's noise, whatever its interval says (`noise_floor.csv`; `within_noise_floor` in "
        "`comparisons.csv`)."
    ]


def _share(value: float) -> str:
    """A share in percent; beyond 1000 % (a chi-square bound from 2 runs) only that it is.

    >>> _share(0.158), _share(37500.5)
    ('16%', 'over 1000%')
    """
    return "over 1000%" if value > 10 else f"{value:.0%}"


def verdict_lines(comparisons: Table, repeats: Table) -> list[str]:
    """The report's sentences: one per comparison, and what to do when nothing was repeated."""
    lines = []
    if repeats.rows and all(row["repeats"] < MIN_RUNS for row in repeats.rows):
        lines.append(
            f"Intervals need {MIN_RUNS} runs a side: every setting here ran once (a grid block's "
            "`repeats:`, or `trainer grid --repeat N`); the speedups below are single ratios of noisy "
            "numbers."
        )
    if not comparisons.rows:
        lines.append("No comparison: no baseline shares a setting's model, data, batch size and LR.")
    for row in comparisons.rows:
        for name, words in SPEEDUP_WORDS.items():
            if row[f"{name}_speedup"] is not None or row[f"{name}_verdict"].startswith(
                ("undecided", "faster", "slower")
            ):
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
    noise"; "1.05x (95 % interval 0.80-1.38), within the noise: a verdict needs about 14 runs a side"; a
    time some run never reached: its verdict alone ("undecided: 2 of 3 vs 3 of 3 reached")."""
    if row[f"{name}_speedup"] is None:
        return row[f"{name}_verdict"]
    interval = (
        f" (95 % interval {row[f'{name}_ci_low']:.2f}-{row[f'{name}_ci_high']:.2f})"
        if row[f"{name}_ci_low"] is not None
        else ""
    )
    needed = row.get(f"{name}_runs_needed")
    needs = f": a verdict on a difference this size needs about {needed} runs a side" if needed else ""
    return f"{row[f'{name}_speedup']:.2f}x{interval}, {row[f'{name}_verdict']}{needs}"


def against_baselines(row: dict[str, Any] | None) -> str:
    """The diagnosis's column: every speedup of a setting's comparisons row, in words."""
    if row is None:
        return "no baselines to compare with"
    parts = [
        f"{words} {speedup_words(row, name)}"
        for name, words in SPEEDUP_WORDS.items()
        if row[f"{name}_speedup"] is not None or row[f"{name}_verdict"] != "no data"
    ]
    return "; ".join(parts) or "no data"
