"""The effect of each factor (target batch size, local updates, peers, batch size, learning rate, and what
Hivemind's averaging meets on the wire: compression, cross traffic) on the study's metrics, with a verdict
only where the repeats carry one."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from controller.report.data import Experiment
from controller.report.intervals import (
    level_against_reference,
    mean_interval,
)
from controller.report.metrics import (
    Analysis,
    Table,
    make_table,
    median,
)

EFFECT_FACTORS = (
    *("target_batch_size", "local_updates", "peers", "batch_size", "learning_rate"),
    *("compression", "cross_traffic", "latency_ms"),
)
EFFECT_METRICS = (
    "time_to_target_seconds",
    "time_to_accuracy_seconds",
    "samples_per_second",
    "averaging_share",
    "final_loss",
    # what the peers sent per sample (their interfaces' counters; Hivemind's own traffic alone) and the link
    # rate Hivemind's rounds got (docs/network.md)
    "sent_bytes_per_sample",
    "hivemind_bytes_per_sample",
    "link_mbit",
    # the median all-reduce of the ok gradient rounds (modelled s): what added delay lengthens
    "allreduce_seconds",
)
#: the level every other level of a factor is compared with, where it is not the first in order; an unset
#: factor (no cross traffic) is the level "none"
REFERENCE_LEVELS = {"compression": "none", "cross_traffic": "none"}
#: what varies with a factor by design and so is not held equal when its effect is measured: the study gives
#: the peers a fixed budget of vCPUs (16 / peers each)
EFFECT_COVARIES = {"peers": ("vcpus",)}
#: the run's schedule, which a grid derives from the factors (steps = the experiment's samples / (peers x
#: batch size), an evaluation every steps / 8, ...): runs are matched on the samples all peers train in the
#: experiment instead, and compared on time to target and per-sample figures
SCHEDULE_VARIABLES = ("max_steps", "eval_every", "eval_batches")


def samples_per_experiment(e: Experiment) -> int | None:
    """The samples all the run's peers train together: steps x batch size x peers (a baseline: one)."""
    steps, batch = e.settings.get("max_steps"), e.settings.get("batch_size")
    if steps is None or batch is None:
        return None
    return int(steps) * int(batch) * (1 if e.is_baseline else e.peer_count)


def effect_cell(e: Experiment, factor: str) -> tuple[tuple[str, Any], ...]:
    """The runs a factor's levels are compared within: equal in every other variable that defines a
    setting, the schedule aside (SCHEDULE_VARIABLES), and in the samples of the experiment."""
    ignored = (factor, *EFFECT_COVARIES.get(factor, ()), *SCHEDULE_VARIABLES)
    kept = tuple(item for item in e.setting_key() if item[0] not in ignored)
    return (*kept, ("samples_per_experiment", samples_per_experiment(e)))


def effects_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """A factor's effect, measured only between runs that differ in it alone: per factor, the
    runs are split into cells equal in every other setting; within each cell with two levels or more, one row
    per level, strategy and metric with every run's value, the t-interval of the mean and the level against
    the cell's first level (the reference) with a verdict. A level that shares no cell with another level is
    confounded: its row names the settings that differ too, and gives no ratio. The steps and evaluations
    of a run are not held equal, its samples are (SCHEDULE_VARIABLES)."""
    shares = {row["experiment_id"]: row["averaging_share"] for row in analysis.tables["breakdown"].rows}

    def value(e: Experiment, metric: str) -> float | None:
        v = shares[e.experiment_id] if metric == "averaging_share" else rows[e.experiment_id][metric]
        return v if v is not None and math.isfinite(v) else None

    table = []
    for factor in EFFECT_FACTORS:
        # Hivemind's own factors among Hivemind runs; peers and cross traffic among the strategies with peers;
        # batch size and LR among all; never the grid's noise floor (a measurement of the testbed)
        subset = [
            e
            for e in analysis.experiments
            if not e.is_noise_floor
            and (
                factor in ("batch_size", "learning_rate")
                or (factor in ("peers", "cross_traffic", "latency_ms") and not e.is_baseline)
                or e.strategy == "hivemind"
            )
        ]
        cells: dict[tuple[Any, ...], dict[Any, list[Experiment]]] = defaultdict(lambda: defaultdict(list))
        for e in subset:
            level = e.peer_count if factor == "peers" else dict(e.setting_key()).get(factor)
            if level is None and factor in REFERENCE_LEVELS:
                level = "none"
            if level is not None:
                cells[effect_cell(e, factor)][level].append(e)
        matched = {level for levels in cells.values() if len(levels) > 1 for level in levels}
        for levels in cells.values():
            reference = REFERENCE_LEVELS.get(factor)
            ordered = sorted(levels, key=lambda level: (level != reference, str(type(level)), level))
            if len(ordered) < 2:
                continue
            reference_level = ordered[0]
            for level in ordered:
                runs = levels[level]
                for metric in EFFECT_METRICS:
                    values = [v for e in runs if (v := value(e, metric)) is not None]
                    reference = [v for e in levels[reference_level] if (v := value(e, metric)) is not None]
                    interval = mean_interval(values)
                    table.append(
                        {
                            "factor": factor,
                            "cell": levels[reference_level][0].label(),
                            "level": level,
                            "strategy": runs[0].strategy_label(),
                            "metric": metric,
                            "experiments": len(runs),
                            "n": len(values),
                            "median": median(values),
                            "min": min(values) if values else None,
                            "max": max(values) if values else None,
                            "ci_low": interval[0] if interval else None,
                            "ci_high": interval[1] if interval else None,
                            "reference_level": reference_level,
                            **(
                                {} if reference_level == level else level_against_reference(values, reference)
                            ),
                            "values": " ".join(f"{v:.6g}" for v in values),
                            "points": values,  # not a column: the effect plots' dots, unrounded
                        }
                    )
        table += _confounded(factor, cells, matched)
    columns = (
        *("factor", "cell", "level", "strategy", "metric", "experiments", "n", "median", "min", "max"),
        *("ci_low", "ci_high", "reference_level", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict"),
        "values",
    )
    title = (
        "Effects of TBS, local updates, peers, batch size, LR, compression and cross traffic, each between "
        "runs that differ in it alone (and in the steps and evaluations that train the same samples)"
    )
    return make_table("effects", title, table, columns)


def _confounded(
    factor: str, cells: dict[tuple[Any, ...], dict[Any, list[Experiment]]], matched: set[Any]
) -> list[dict[str, Any]]:
    """A row for each level of ``factor`` that shares no cell with another level: what else differs."""
    levels = {level for by_level in cells.values() for level in by_level}
    if len(levels) < 2:
        return []
    rows = []
    for cell, by_level in cells.items():
        for level, runs in by_level.items():
            if level in matched or len(by_level) > 1:
                continue
            others = [other for other in cells if other != cell]
            differing = sorted(
                {name for other in others for (name, v), (_, w) in zip(cell, other, strict=True) if v != w}
            )
            rows.append(
                {
                    "factor": factor,
                    "cell": runs[0].label(),
                    "level": level,
                    "strategy": runs[0].strategy_label(),
                    "metric": "",
                    "experiments": len(runs),
                    "n": 0,
                    "median": None,
                    "min": None,
                    "max": None,
                    "ci_low": None,
                    "ci_high": None,
                    "verdict": f"confounded with {', '.join(differing) or 'nothing measured'}",
                    "values": "",
                    "points": [],
                }
            )
    return rows


def effect_verdicts(effects: Table) -> list[str]:
    """The effects section's sentences: each level that differs from its cell's reference level beyond the
    noise, the confounded levels, and how many comparisons were within the noise or need runs."""
    lines, within, unrepeated = [], 0, 0
    for row in effects.rows:
        verdict = row.get("verdict")
        if verdict == "within the noise":
            within += 1
        elif verdict and verdict.startswith("needs"):
            unrepeated += 1
        elif verdict and verdict.startswith("confounded"):
            lines.append(
                f"{row['strategy']}, {row['factor']} = {row['level']} (`{row['cell']}`): no run differs from "
                f"it in {row['factor']} alone, {verdict}: its effect is not measured."
            )
        elif verdict and verdict.endswith("beyond the noise"):
            lines.append(
                f"{row['strategy']}, {row['factor']} = {row['level']} against {row['reference_level']} "
                f"(`{row['cell']}`): {row['metric']} {row['ratio']:.2f}x (95 % interval "
                f"{row['ratio_ci_low']:.2f}-{row['ratio_ci_high']:.2f}), {verdict}."
            )
    lines.append(
        f"{within} level comparisons within the noise, {unrepeated} that need runs "
        "(`effects.csv`: ratio, interval and verdict of every level against its cell's first level)."
    )
    return lines
