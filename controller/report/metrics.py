"""The report's numbers, each computed from the raw steps.csv / rounds.csv rows of an experiment.

Definitions (also printed in report.md):

- **loss curve**: every peer's steps merged in order of ``wall_seconds`` (seconds since the start
  barrier's release), each point the mean training loss of the last ``LOSS_WINDOW × peers`` merged steps
  (for a baseline exactly the trainer's own smoothed loss, trainer/stats.py).
- **wall time**: the largest ``wall_seconds`` of any peer's last step; **throughput**: all peers' samples
  / wall.
- **time to target**: the first wall time at which the loss curve is at or below the target loss.
- **time to accuracy**: the wall time by which every peer's validation (evals.csv, every ``eval_every``
  steps) has reached the target accuracy: per peer its first eval at or above it, the latest of those. The
  default target, per comparison group, is the accuracy every baseline repeat reaches (the lowest of their
  best accuracies), as the thesis chose it; runs without evals have none.
- **speedup**: median time to target of the matching baselines / the Hivemind experiment's time to
  target; **scaling efficiency** (``scaling_efficiency``, the one definition every table uses): speedup ×
  baseline vCPUs / (peers × vCPUs per peer), 1.0 = as fast per vCPU; under a fixed budget of vCPUs it is
  the speedup itself, against a ceiling of 1.0.
- **strategies**: per run, its throughput over the median of its baselines' (same model, data, batch size
  and LR) is the throughput speedup S, its scaling efficiency from S; **bytes sent per sample**: what all its
  peers' network interfaces sent from the start barrier's release to the loop's end (summary.json
  ``network``) over the samples they trained; memory: the largest peak RSS and optimizer-state bytes of
  any of its peers (summary.json ``memory``).
- **memory per rank**: the largest parameter, gradient and optimizer-state bytes any peer of a run holds
  (a sharding strategy's shard; DeepSpeed's also counts its fp32 partition copies), and its peak RSS.
- **step-time breakdown**: sums over every step of every peer of data, compute, averaging, the
  optimizer's own time (optimizer − averaging) and the rest (step − data − compute − optimizer); shares
  of the summed step time.
- **run edges** (Hivemind): the steps of all peers grouped by their Hivemind epoch into the first epoch,
  the middle epochs and the last two; per-step means of each phase (start-up or shutdown artefacts show
  as edges unlike the middle).
- **averaging bound**: 2α + 2(n−1)/n · M / B per round, n = the round's group size, M = parameters × 4 bytes,
  α the link's one-way delay (``latency_ms``, 0 where none was set).
- **peers** (Hivemind): a peer's **contribution** is its share of the run's samples; it **arrived** at an
  epoch's end when the step that took it to the next epoch began to wait for averaging (step end − averaging
  time); at each epoch all peers ended, the last to arrive is the one the others waited for, and each peer's
  wait is the last arrival minus its own.
- **diagnosis**: a run's bound is the largest of its data, compute, communication (all-reduce, as far as a
  step waited for it) and coordination (the rest of the steps' averaging wait) shares of the summed step
  time, unless one peer is a straggler (the last to arrive at 3/4 or more of the epoch ends while every other
  peer waited for it 20 % or more of its time, or below 0.7 of the others' median samples/s) or a peer used
  less than 0.8 of its CPU limit (host).
- **prediction** (Hivemind, gradient averaging): per epoch T_compute = TBS / (n · bs) · t_step (t_step: the
  measured step time without averaging) and T_communicate = matchmaking + 2α + (1 + 1/k) · 2(n−1)/n · M / B
  (matchmaking: the median the gradient rounds measured, the configured time where none did; k =
  ``average_state_every``: the state round's bytes share the link);
  granularity T_compute / T_communicate; predicted speedup TBS / (T_compute + T_communicate) over the
  baselines' samples/s, against the measured one (error: predicted / measured − 1).
- **shaped links** (Hivemind runs with ``bandwidth_mbit``): a run is **communication-bound** when averaging
  is the largest of its data, compute and averaging shares of step time; per setting, the highest link rate
  at which it still is (``communication_bound_up_to_mbit``) and the lowest above it at which it is not.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.report.data import Experiment
from experiment.results import LOSS_WINDOW

#: strategies whose ranks' parameter bytes are not the model's size (shards, fp32 partition copies,
#: DiLoCo's copy of the parameters at the last sync)
PARTITIONING_STRATEGIES = ("fsdp", "deepspeed", "diloco")

if TYPE_CHECKING:
    from controller.calibration import Calibration


@dataclass
class Table:
    """A report table: written as CSV and rendered into report.md."""

    name: str
    title: str
    columns: tuple[str, ...]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def write_csv(self, directory: Path) -> Path:
        path = directory / f"{self.name}.csv"
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(self.columns)
            for row in self.rows:
                writer.writerow([_csv_cell(row.get(column)) for column in self.columns])
        return path

    def markdown(self, limit: int = 60) -> str:
        if not self.rows:
            return "_no data_\n"
        lines = ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        for row in self.rows[:limit]:
            lines.append("| " + " | ".join(_md_cell(row.get(column)) for column in self.columns) + " |")
        if len(self.rows) > limit:
            lines.append(f"\n_{len(self.rows) - limit} more rows in `{self.name}.csv`_")
        return "\n".join(lines) + "\n"


def make_table(name: str, title: str, rows: list[dict[str, Any]], columns: tuple[str, ...] = ()) -> Table:
    if not columns:
        columns = tuple(dict.fromkeys(key for row in rows for key in row)) or ("experiment_id",)
    return Table(name, title, columns, rows)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Analysis:
    """Everything the report shows (built by controller/report/analysis.py); each table is also written as
    CSV."""

    experiments: list[Experiment]
    curves: dict[str, tuple[list[float], list[float]]]
    targets: dict[str, float | None]
    model_bytes: dict[str, int]
    bandwidth: float | None
    #: per experiment the validation accuracy its time to accuracy is measured against (None: no target)
    accuracy_targets: dict[str, float | None] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    round_samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the compute calibration behind each speedup's no-communication ceiling (controller/calibration.py)
    calibration: Calibration | None = None


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        # 12 significant digits: exact enough for tiny values (sub-ms rounds), short for large ones
        return "nan" if math.isnan(value) else f"{value:.12g}"
    return value


def _md_cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------------------------------- per experiment


def merged_steps(experiment: Experiment) -> list[dict[str, Any]]:
    """Every peer's steps that have a wall time, ordered by it."""
    rows = [row for peer in experiment.peers for row in peer.steps if row.get("wall_seconds") is not None]
    return sorted(rows, key=lambda row: row["wall_seconds"])


def loss_curve(experiment: Experiment) -> tuple[list[float], list[float]]:
    """(wall seconds, smoothed loss) over the merged steps (see module docstring)."""
    window = LOSS_WINDOW * max(1, len(experiment.peers))
    times: list[float] = []
    losses: list[float] = []
    recent: list[float] = []
    for row in merged_steps(experiment):
        loss = row.get("loss")
        if loss is None or not math.isfinite(loss):
            continue
        recent.append(loss)
        if len(recent) > window:
            recent.pop(0)
        times.append(row["wall_seconds"])
        losses.append(sum(recent) / len(recent))
    return times, losses


def time_to_target(curve: tuple[list[float], list[float]], target: float | None) -> float | None:
    if target is None:
        return None
    for seconds, loss in zip(*curve, strict=True):
        if loss <= target:
            return seconds
    return None


def time_to_accuracy(experiment: Experiment, target: float | None) -> float | None:
    """The wall time by which every peer that evaluated reached ``target`` accuracy (module docstring).

    >>> from controller.report.data import PeerRun
    >>> peer = lambda *points: PeerRun("p", [], [], True, evals=[
    ...     {"wall_seconds": t, "val_accuracy": a} for t, a in points])
    >>> run = Experiment("x", Path("x"), {}, True, [peer((10, 0.5), (20, 0.8)), peer((12, 0.85))])
    >>> time_to_accuracy(run, 0.8), time_to_accuracy(run, 0.9), time_to_accuracy(run, None)
    (20, None, None)
    """
    if target is None:
        return None
    reached = []
    for peer in experiment.peers:
        if not peer.evals:
            continue
        times = [
            row["wall_seconds"]
            for row in peer.evals
            if row.get("wall_seconds") is not None and (row.get("val_accuracy") or 0.0) >= target
        ]
        if not times:
            return None
        reached.append(min(times))
    return max(reached) if reached else None


def best_accuracy(experiment: Experiment) -> float | None:
    """The highest validation accuracy any peer measured (None: no evals)."""
    values = [row["val_accuracy"] for peer in experiment.peers for row in peer.evals]
    values = [value for value in values if value is not None]
    return max(values, default=None)


def wall_seconds(experiment: Experiment) -> float | None:
    ends = [peer.steps[-1]["wall_seconds"] for peer in experiment.peers if peer.steps]
    ends = [end for end in ends if end is not None]
    return max(ends) if ends else None


def total(rows: Iterable[dict[str, Any]], column: str) -> float:
    return float(sum(row.get(column) or 0.0 for row in rows))


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def scaling_efficiency(
    speedup: float | None, vcpus: float | None, baseline_vcpus: float | None
) -> float | None:
    """The one definition of scaling efficiency: the speedup per vCPU against the baseline's,
    S x baseline vCPUs / the run's vCPUs (all peers'). 1.0: as fast per vCPU as the baseline. Under the
    study's fixed budget (the peers share the baseline's 16 vCPUs) it equals S, and 1.0 is the ceiling of
    training without communication; with a baseline's vCPUs per peer it is S / N.

    >>> scaling_efficiency(1.6, 16, 16), scaling_efficiency(3.0, 4 * 16, 16), scaling_efficiency(None, 4, 4)
    (1.6, 0.75, None)
    """
    if speedup is None or not vcpus or not baseline_vcpus:
        return None
    return speedup * baseline_vcpus / vcpus


def latency_seconds(e: Experiment) -> float:
    """The run's one-way link delay in (modelled) seconds: ``latency_ms`` / 1000, 0 where none was set."""
    return float(e.settings.get("latency_ms") or 0.0) / 1000


def bandwidth_bound(group_size: int, model_bytes: float, bandwidth: float, latency: float = 0.0) -> float:
    """Seconds a bandwidth-optimal all-reduce needs at least (the alpha-beta bound): 2 α + 2(n−1)/n · M / B,
    α the one-way link delay (``latency_ms``), paid once in each of the two phases (reduce-scatter and
    all-gather, every part in parallel in Hivemind's butterfly all-reduce).

    >>> bandwidth_bound(2, 10e6, 10e6), bandwidth_bound(2, 10e6, 10e6, latency=0.05)
    (1.0, 1.1)
    """
    return 2 * latency + 2 * (group_size - 1) / group_size * model_bytes / bandwidth


# ---------------------------------------------------------------------------------------- targets


def default_targets(experiments: list[Experiment], curves: dict[str, Any]) -> dict[tuple[Any, ...], float]:
    """Per comparison group: the highest final smoothed loss of its baseline repeats (all reach it); in a
    group without baselines (a grid that compares settings with each other), the highest final smoothed loss
    of all its runs, so that every run has a time to it."""
    baselines: dict[tuple[Any, ...], float] = {}
    everyone: dict[tuple[Any, ...], float] = {}
    for experiment in experiments:
        losses = curves[experiment.experiment_id][1]
        if not losses or experiment.is_noise_floor:
            continue
        key = experiment.comparison_key()
        everyone[key] = max(everyone.get(key, -math.inf), losses[-1])
        if experiment.is_baseline:
            baselines[key] = max(baselines.get(key, -math.inf), losses[-1])
    return {**everyone, **baselines}


def default_accuracy_targets(experiments: list[Experiment]) -> dict[tuple[Any, ...], float]:
    """Per comparison group: the accuracy every baseline repeat reaches (the lowest of their best)."""
    targets: dict[tuple[Any, ...], float] = {}
    for experiment in experiments:
        best = best_accuracy(experiment)
        if experiment.is_baseline and best is not None:
            key = experiment.comparison_key()
            targets[key] = min(targets.get(key, math.inf), best)
    return targets


def target_for(
    experiment: Experiment, targets: dict[tuple[Any, ...], float], given: float | None
) -> float | None:
    return given if given is not None else targets.get(experiment.comparison_key())


def model_bytes(experiments: Iterable[Experiment]) -> dict[str, int]:
    """Per model: its parameters in bytes as the trainer measured them (summary.json
    ``memory.parameter_bytes``, the largest of any peer), from the strategies whose ranks hold the model
    whole and only it (not FSDP's, DeepSpeed's or DiLoCo's: shards, partition copies, a second copy). Models
    no such finished peer measured are left out; their bandwidth bound is then unknown."""
    sizes: dict[str, int] = {}
    for experiment in experiments:
        model = experiment.settings.get("model")
        if experiment.strategy in PARTITIONING_STRATEGIES:
            continue
        for peer in experiment.peers:
            measured = (peer.summary.get("memory") or {}).get("parameter_bytes")
            if model and isinstance(measured, int) and measured > 0:
                sizes[str(model)] = max(sizes.get(str(model), 0), measured)
    return dict(sorted(sizes.items()))
