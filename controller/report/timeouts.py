"""Timeouts chosen by measurement (grids/timeouts.yml): which ``matchmaking_time`` and
``averaging_timeout`` reach the target loss soonest.

Experiments that share every other setting (strategy, peers, model, data, batch size, link, churn, ...) form
one group; within it each (matchmaking_time, averaging_timeout) pair is a candidate with its repeats. The
target is the group's own: the highest final smoothed loss of any of its runs, so every run reaches it
(the baselines' target does not apply: a timeouts grid need not run one). Per candidate: the mean time to
that target with a 95 % t-interval over its repeats, and the failed rounds per run.

The recommendation is the candidate with the smallest mean time to target; a candidate is tied with it where
the interval of their times' ratio holds 1 (controller/report/intervals.py: Welch on logarithms, from 2
runs a side), and among the tied the fewest failed rounds win (then the fastest). A candidate with fewer
runs is neither tied nor beaten: undecided, and the recommendation says against how many (an
overlap of percentile-bootstrap intervals would compare min-max ranges at 2 runs).

A group whose target is not below where its runs started (a run that ended no better than it began) did not
learn: every run "reaches" that target at once, so the times measure noise. It gets no recommendation, and
the report says to run longer.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from controller.report.data import Experiment
from controller.report.intervals import MIN_RUNS, geometric_ratio, mean_interval, ratio_interval, verdict
from controller.report.metrics import Table, time_to_target

TIMEOUT_KEYS = ("matchmaking_time", "averaging_timeout")
COLUMNS = (
    "group",
    "matchmaking_time",
    "averaging_timeout",
    "repeats",
    "target_loss",
    "time_to_target_mean",
    "time_to_target_ci_low",
    "time_to_target_ci_high",
    "rounds_failed_per_run",
    "samples_per_second_mean",
    "recommended",
    "against_fastest",
    "why",
)


def _group_key(e: Experiment) -> tuple[Any, ...]:
    return tuple(item for item in e.setting_key() if item[0] not in TIMEOUT_KEYS)


def _group_label(e: Experiment) -> str:
    label = e.label()
    return label.split(" mm", 1)[0] + (" churn" if e.settings.get("churn") else "")


def timeouts_table(
    experiments: list[Experiment], curves: dict[str, Any], rows: dict[str, dict[str, Any]]
) -> Table:
    """One row per timeout pair of every group that tried more than one (see the module docstring).

    ``curves``: per experiment its smoothed loss curve (times, losses); ``rows``: the experiments table's rows
    (samples_per_second, rounds_failed)."""
    groups: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    for e in experiments:
        if e.strategy == "hivemind" and not e.is_noise_floor and all(e.settings.get(k) for k in TIMEOUT_KEYS):
            groups[_group_key(e)].append(e)
    table: list[dict[str, Any]] = []
    for members in groups.values():
        pairs: dict[tuple[float, float], list[Experiment]] = defaultdict(list)
        for e in members:
            pairs[tuple(float(e.settings[k]) for k in TIMEOUT_KEYS)].append(e)
        if len(pairs) < 2:
            continue
        finals = [curves[e.experiment_id][1][-1] for e in members if curves[e.experiment_id][1]]
        if not finals:
            continue
        target = max(finals)
        start = min(curves[e.experiment_id][1][0] for e in members if curves[e.experiment_id][1])
        label = _group_label(members[0])
        candidates = [_candidate(label, pair, runs, target, curves, rows) for pair, runs in pairs.items()]
        table.extend(recommend(candidates) if target < start else did_not_learn(candidates, target, start))
    title = "Timeouts: time to the group's target loss per setting, and the one to use"
    return Table("timeouts", title, COLUMNS, table)


def _candidate(
    group: str,
    pair: tuple[float, float],
    runs: list[Experiment],
    target: float,
    curves: dict[str, Any],
    rows: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    times = [t for e in runs if (t := time_to_target(curves[e.experiment_id], target)) is not None]
    interval = mean_interval(times) if len(times) == len(runs) else None
    rates = [float(r) for e in runs if (r := rows[e.experiment_id].get("samples_per_second")) is not None]
    failed = [float(rows[e.experiment_id].get("rounds_failed") or 0) for e in runs]
    return {
        "group": group,
        "matchmaking_time": pair[0],
        "averaging_timeout": pair[1],
        "repeats": len(runs),
        "target_loss": target,
        "time_to_target_mean": statistics.fmean(times) if times else None,
        "time_to_target_ci_low": interval[0] if interval else None,
        "time_to_target_ci_high": interval[1] if interval else None,
        "times": times,  # not a column: the recommendation compares candidates by them
        "rounds_failed_per_run": statistics.fmean(failed) if failed else None,
        "samples_per_second_mean": statistics.fmean(rates) if rates else None,
    }


def recommend(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the recommended candidate of one group (``recommended``, ``why``, ``against_fastest``); fastest
    first. A candidate is tied with the fastest where the ratio of their times' interval (``ratio_interval``:
    Welch on logarithms, MIN_RUNS runs a side) holds 1; among the tied the fewest failed rounds win. One with
    fewer runs is undecided, never tied: the fastest stays the choice and ``why`` says what is not decided.

    >>> rows = recommend([
    ...     {"matchmaking_time": 5.0, "averaging_timeout": 60.0, "time_to_target_mean": 30.0,
    ...      "times": [26.0, 34.0, 30.0], "rounds_failed_per_run": 0.0},
    ...     {"matchmaking_time": 1.0, "averaging_timeout": 10.0, "time_to_target_mean": 28.0,
    ...      "times": [25.0, 31.0, 28.0], "rounds_failed_per_run": 4.0},
    ...     {"matchmaking_time": 2.0, "averaging_timeout": 10.0, "time_to_target_mean": 45.0,
    ...      "times": [45.0], "rounds_failed_per_run": 0.0}])
    >>> [(r["matchmaking_time"], r["recommended"]) for r in rows]
    [(1.0, False), (5.0, True), (2.0, False)]
    >>> rows[1]["why"]
    'tied with the fastest (within the noise), fewer failed rounds (0 vs 4 per run); undecided against 1 \
setting(s) of fewer than 2 runs'
    >>> rows[2]["against_fastest"]
    '1.61x its time, needs 2 runs a side'
    """
    reached = [c for c in candidates if c.get("time_to_target_mean") is not None]
    reached.sort(key=lambda c: c["time_to_target_mean"])
    others = [c for c in candidates if c.get("time_to_target_mean") is None]
    for c in candidates:
        c.update(recommended=False, why="", against_fastest="")
    for c in others:
        c["why"] = "never reached the target"
    if not reached:
        return reached + others
    fastest = reached[0]
    tied, undecided = [fastest], []
    for c in reached[1:]:
        interval = ratio_interval(c.get("times") or [], fastest.get("times") or [])
        ratio = geometric_ratio(c.get("times") or [], fastest.get("times") or [])
        c["against_fastest"] = (
            f"{ratio:.2f}x its time"
            + (f" (95 % interval {interval[0]:.2f}-{interval[1]:.2f})" if interval else "")
            + f", {verdict(interval, ('slower', 'faster'))}"
            if ratio is not None
            else ""
        )
        if interval is None:
            undecided.append(c)
        elif interval[0] <= 1 <= interval[1]:
            tied.append(c)
    choice = min(tied, key=lambda c: (c.get("rounds_failed_per_run") or 0.0, c["time_to_target_mean"]))
    choice["recommended"] = True
    if choice is fastest and len(tied) == 1:
        choice["why"] = "fastest to the target"
    elif choice is fastest:
        choice["why"] = "fastest to the target, and no more failed rounds than those tied with it"
    else:
        ours, theirs = choice.get("rounds_failed_per_run") or 0, fastest.get("rounds_failed_per_run") or 0
        choice["why"] = (
            f"tied with the fastest (within the noise), fewer failed rounds ({ours:g} vs {theirs:g} per run)"
        )
    if undecided:
        choice["why"] += f"; undecided against {len(undecided)} setting(s) of fewer than {MIN_RUNS} runs"
    return reached + others


def did_not_learn(candidates: list[dict[str, Any]], target: float, start: float) -> list[dict[str, Any]]:
    """A group with nothing to compare: its target loss is not below its runs' lowest starting loss.

    >>> rows = did_not_learn([{"time_to_target_mean": 1.2}, {"time_to_target_mean": 3.5}], 2.308, 2.298)
    >>> [r["recommended"] for r in rows], rows[0]["why"][:57]
    ([False, False], 'no recommendation: the target loss 2.308 is not below the')
    """
    why = f"no recommendation: the target loss {target:.3f} is not below the runs' starting loss {start:.3f}"
    for c in candidates:
        c.update(recommended=False, why=f"{why} (run longer)")
    return sorted(
        candidates, key=lambda c: (c.get("time_to_target_mean") is None, c.get("time_to_target_mean"))
    )


def recommendation_lines(table: Table) -> list[str]:
    """The report's section: per group the recommended timeouts and the evidence."""
    lines = []
    unlearned = {row["group"]: row["why"] for row in table.rows if row["why"].startswith("no recommendation")}
    for group, why in unlearned.items():
        lines.append(f"- **{group}**: {why}; its runs did not learn, so their times measure noise.")
    for row in table.rows:
        if not row.get("recommended"):
            continue
        group = [r for r in table.rows if r["group"] == row["group"]]
        interval = (
            f" (95 % interval {row['time_to_target_ci_low']:.1f}-{row['time_to_target_ci_high']:.1f} s)"
            if row.get("time_to_target_ci_low") is not None
            else ""
        )
        lines.append(
            f"- **{row['group']}**: matchmaking_time={row['matchmaking_time']:g} s, "
            f"averaging_timeout={row['averaging_timeout']:g} s: {row['time_to_target_mean']:.1f} s to loss "
            f"{row['target_loss']:.3f}{interval}, {row['rounds_failed_per_run']:g} failed rounds per run, "
            f"over {row['repeats']} repeat(s); {row['why']}. {len(group)} settings tried (timeouts.csv)."
        )
    return lines
