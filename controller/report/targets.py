"""Time to target as a curve: the time each setting's runs take to reach every loss target from the loosest
all complete runs reach to the tightest any reaches, and every accuracy target from the lowest all reach to
the highest any reaches, instead of one target chosen after the runs.

``target_curves.csv``: per setting, metric (loss or accuracy) and target, how many of its repeats reached it
and the median, smallest and largest time (modelled seconds, on the training clock). ``target_curves.png``
plots the medians against the target, the repeats' range shaded. ``TARGET_POINTS`` targets a metric, evenly
spaced.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import Table, time_to_accuracy, time_to_target

TARGET_POINTS = 12
TARGET_COLUMNS = (
    "setting",
    "metric",
    "target",
    "reached",
    "repeats",
    "median_seconds",
    "min_seconds",
    "max_seconds",
)


def target_range(ends: list[float], lower_is_tighter: bool) -> list[float]:
    """``TARGET_POINTS`` targets between the loosest every run reaches and the tightest any reaches, given
    each run's best value (its lowest loss, or its highest accuracy).

    >>> losses = target_range([0.5, 0.8, 0.6], lower_is_tighter=True)
    >>> [round(t, 3) for t in losses[:2]], round(losses[-1], 3), len(losses)
    ([0.8, 0.773], 0.5, 12)
    >>> target_range([], lower_is_tighter=True)
    []
    """
    if not ends:
        return []
    loosest = max(ends) if lower_is_tighter else min(ends)
    tightest = min(ends) if lower_is_tighter else max(ends)
    if loosest == tightest:
        return [loosest]
    step = (tightest - loosest) / (TARGET_POINTS - 1)
    return [loosest + step * index for index in range(TARGET_POINTS)]


def target_curves_table(
    experiments: list[Experiment], curves: dict[str, tuple[list[float], list[float]]]
) -> Table:
    """The table of the module docstring over the complete runs (the noise floor's solo runs left out)."""
    runs = [
        e
        for e in experiments
        if e.complete and not e.is_noise_floor and curves.get(e.experiment_id, ([], []))[1]
    ]
    groups: dict[str, list[Experiment]] = defaultdict(list)
    for e in runs:
        groups[e.label()].append(e)
    best_loss = [min(curves[e.experiment_id][1]) for e in runs]
    accuracies = {e.experiment_id: _best_accuracy(e) for e in runs}
    best_accuracy = [value for value in accuracies.values() if value is not None]
    rows: list[dict[str, Any]] = []
    for metric, targets in (
        ("loss", target_range(best_loss, lower_is_tighter=True)),
        ("accuracy", target_range(best_accuracy, lower_is_tighter=False)),
    ):
        for setting, group in sorted(groups.items()):
            for target in targets:
                if metric == "loss":
                    times = [time_to_target(curves[e.experiment_id], target) for e in group]
                else:
                    times = [time_to_accuracy(e, target) for e in group]
                reached = [t for t in times if t is not None]
                rows.append(
                    {
                        "setting": setting,
                        "metric": metric,
                        "target": round(target, 4),
                        "reached": len(reached),
                        "repeats": len(group),
                        "median_seconds": statistics.median(reached) if reached else None,
                        "min_seconds": min(reached) if reached else None,
                        "max_seconds": max(reached) if reached else None,
                    }
                )
    title = "Time to target against the target, per setting (modelled seconds on the training clock)"
    return Table("target_curves", title, TARGET_COLUMNS, rows)


def _best_accuracy(e: Experiment) -> float | None:
    values = [
        row["val_accuracy"] for peer in e.peers for row in peer.evals if row.get("val_accuracy") is not None
    ]
    return max(values) if values else None
