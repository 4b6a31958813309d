"""Each strategy at its own best learning rate, against the baseline at its own (best_learning_rate.csv).

A grid that tries several learning rates for a setting (everything else equal: effects.py's cells) lets each
strategy be compared at the rate that suits it, not at one shared rate. Per cell, the best rate is the one
whose runs reach the loss target soonest (the median over the runs, among the rates whose every run reached
it), else, where no rate's runs all reach it, the lowest median final loss. Each cell's best is then set
against the baseline's best at the same batch size and samples: the ratio of the geometric means of the time
to the target, its 95 % interval and its verdict (intervals.py). The best is chosen from the same runs it is
measured on, so the comparison is exploratory: a confirmatory one runs the chosen rates again.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from controller.report.data import Experiment
from controller.report.effects import effect_cell
from controller.report.intervals import level_against_reference
from controller.report.metrics import Analysis, Table, make_table, median

COLUMNS = (
    *("cell", "strategy", "learning_rates", "best_learning_rate", "chosen_by", "runs", "reached"),
    *("time_to_target_seconds", "final_loss", "against", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict"),
)


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def best_level(levels: dict[float, list[Experiment]], rows: dict[str, dict[str, Any]]) -> tuple[float, str]:
    """The best learning rate of a cell and what chose it (``time to target`` or ``final loss``).

    >>> rows = {"a": {"time_to_target_seconds": 10.0, "final_loss": 0.5},
    ...         "b": {"time_to_target_seconds": 6.0, "final_loss": 0.4},
    ...         "c": {"time_to_target_seconds": None, "final_loss": 0.3}}
    >>> run = lambda name: Experiment(name, None, {}, True)
    >>> best_level({0.01: [run("a")], 0.1: [run("b")], 0.001: [run("c")]}, rows)
    (0.1, 'time to target')
    >>> best_level({0.01: [run("c")]}, rows)
    (0.01, 'final loss')
    """

    def times(level: float) -> list[float]:
        return _finite([rows[e.experiment_id].get("time_to_target_seconds") for e in levels[level]])

    reached = [level for level in levels if len(times(level)) == len(levels[level])]
    if reached:
        return min(reached, key=lambda level: (median(times(level)), level)), "time to target"
    losses = {
        level: _finite([rows[e.experiment_id].get("final_loss") for e in levels[level]]) for level in levels
    }

    def loss(level: float) -> tuple[float, float]:
        return (median(losses[level]) if losses[level] else math.inf, level)

    return min(levels, key=loss), "final loss"


def best_learning_rate_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Per cell with two or more learning rates: the best one, its runs' time to target and final loss, and
    (not for the baseline) the ratio of its time to the baseline's best at the same batch size and samples."""
    cells: dict[tuple[Any, ...], dict[float, list[Experiment]]] = defaultdict(lambda: defaultdict(list))
    for e in analysis.experiments:
        rate = e.settings.get("learning_rate")
        if not e.is_noise_floor and rate is not None:
            cells[effect_cell(e, "learning_rate")][float(rate)].append(e)
    tuned = {key: levels for key, levels in cells.items() if len(levels) > 1}
    best: dict[tuple[Any, ...], tuple[float, str]] = {
        key: best_level(levels, rows) for key, levels in tuned.items()
    }

    def times(runs: list[Experiment]) -> list[float]:
        return _finite([rows[e.experiment_id].get("time_to_target_seconds") for e in runs])

    def baseline_of(e: Experiment) -> tuple[Any, ...] | None:
        """The baseline cell at the same batch size, model, dataset and samples as ``e``'s."""
        for key, levels in tuned.items():
            other = next(iter(levels.values()))[0]
            same = ("batch_size", "model", "dataset")
            matches = other.is_baseline and all(other.settings.get(k) == e.settings.get(k) for k in same)
            if matches and key[-1] == effect_cell(e, "learning_rate")[-1]:  # the samples of the experiment
                return key
        return None

    table = []
    for key, levels in tuned.items():
        level, chosen_by = best[key]
        runs = levels[level]
        first = runs[0]
        row: dict[str, Any] = {
            "cell": first.label(),
            "strategy": first.strategy_label(),
            "learning_rates": " ".join(f"{rate:g}" for rate in sorted(levels)),
            "best_learning_rate": level,
            "chosen_by": chosen_by,
            "runs": len(runs),
            "reached": len(times(runs)),
            "time_to_target_seconds": median(times(runs)),
            "final_loss": median(_finite([rows[e.experiment_id].get("final_loss") for e in runs])),
        }
        reference = baseline_of(first)
        if not first.is_baseline and reference is not None:
            reference_level, _ = best[reference]
            reference_runs = tuned[reference][reference_level]
            row["against"] = reference_runs[0].label()
            row.update(level_against_reference(times(runs), times(reference_runs)))
        table.append(row)
    title = (
        "Each strategy at its own best learning rate against the baseline at its own (chosen from the same "
        "runs: exploratory)"
    )
    return make_table("best_learning_rate", title, table, COLUMNS)
