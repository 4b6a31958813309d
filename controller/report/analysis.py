"""Build the report's tables from loaded experiments: `analyse` and the experiments table; each other table
is built by its topic's module (breakdown, effects, network, strategies, intervals, diagnosis, faults,
timeouts, cost) from the definitions in controller/report/metrics.py."""

from __future__ import annotations

import statistics
from typing import Any

from controller.calibration import Calibration, hivemind_model_caveats
from controller.report.breakdown import (
    averaging_table,
    breakdown_table,
    epoch_phases_table,
    memory_table,
    peers_table,
)
from controller.report.cost import cost_table
from controller.report.data import Experiment
from controller.report.diagnosis import diagnosis_table, prediction_table
from controller.report.effects import effects_table
from controller.report.faults import faults_table
from controller.report.intervals import (
    comparisons_table,
    noise_floor,
    noise_floor_table,
    repeats_table,
)
from controller.report.metrics import (
    Analysis,
    best_accuracy,
    default_accuracy_targets,
    default_targets,
    loss_curve,
    make_table,
    median,
    model_bytes,
    target_for,
    time_to_accuracy,
    time_to_target,
    total,
    wall_seconds,
)
from controller.report.network import (
    cross_traffic_effect_table,
    cross_traffic_table,
    hivemind_bytes_per_sample,
    link_mbit,
    link_rates_table,
    network_table,
    network_thresholds_table,
    preprocessing_table,
    round_rates_table,
    sent_bytes_per_sample,
)
from controller.report.strategies import strategies_table, time_to_target_table
from controller.report.targets import target_curves_table
from controller.report.timeouts import timeouts_table
from controller.report.tuning import best_learning_rate_table
from experiment.results import ROUND_CAUSES


def analyse(
    experiments: list[Experiment],
    *,
    target_loss: float | None,
    bandwidth: float | None,
    calibration: Calibration | None = None,
    target_accuracy: float | None = None,
) -> Analysis:
    """Compute every table. `target_loss` None: per group the baselines' worst final smoothed loss (no
    baselines: its runs');
    `target_accuracy` None: per group the accuracy every baseline repeat reaches.
    `bandwidth` (bytes/s) None: each experiment's measured value from experiment.json, if any.
    `calibration`: the compute calibration the speedups' ceilings come from (none: no ceilings)."""
    curves = {e.experiment_id: loss_curve(e) for e in experiments}
    group_targets = default_targets(experiments, curves)
    targets = {e.experiment_id: target_for(e, group_targets, target_loss) for e in experiments}
    accuracy_targets = default_accuracy_targets(experiments)
    analysis = Analysis(
        experiments,
        curves,
        targets,
        model_bytes(experiments),
        bandwidth,
        {e.experiment_id: target_for(e, accuracy_targets, target_accuracy) for e in experiments},
        calibration=calibration,
    )
    rows = {e.experiment_id: _experiment_row(analysis, e) for e in experiments}
    analysis.tables["experiments"] = make_table("experiments", "Experiments", list(rows.values()))
    analysis.tables["time_to_target"] = time_to_target_table(analysis, rows)
    analysis.tables["repeats"] = repeats_table(experiments, rows)
    analysis.tables["peers"] = peers_table(experiments)
    analysis.tables["noise_floor"] = noise_floor_table(experiments, rows, analysis.tables["peers"])
    floor = noise_floor(analysis.tables["noise_floor"])
    analysis.tables["comparisons"] = comparisons_table(experiments, rows, floor)
    analysis.tables["breakdown"] = breakdown_table(experiments)
    analysis.tables["epoch_phases"] = epoch_phases_table(experiments)
    analysis.tables["averaging"] = averaging_table(analysis)
    analysis.tables["effects"] = effects_table(analysis, rows)
    analysis.tables["best_learning_rate"] = best_learning_rate_table(analysis, rows)
    analysis.tables["strategies"] = strategies_table(analysis, rows)
    analysis.tables["memory"] = memory_table(analysis)
    analysis.tables["network"] = network_table(analysis, rows)
    analysis.tables["diagnosis"] = diagnosis_table(analysis)
    analysis.tables["prediction"] = prediction_table(analysis, rows)
    analysis.tables["network_thresholds"] = network_thresholds_table(analysis.tables["network"].rows)
    analysis.tables["link_rates"] = link_rates_table(analysis)
    analysis.tables["round_rates"] = round_rates_table(analysis)
    analysis.tables["cross_traffic"] = cross_traffic_table(analysis)
    analysis.tables["cross_traffic_effect"] = cross_traffic_effect_table(analysis)
    analysis.tables["faults"] = faults_table(experiments)
    analysis.tables["timeouts"] = timeouts_table(experiments, curves, rows)
    analysis.tables["preprocessing"] = preprocessing_table(analysis, rows)
    analysis.tables["cost"] = cost_table(analysis, rows)
    analysis.tables["target_curves"] = target_curves_table(experiments, curves)
    return analysis


def _experiment_row(analysis: Analysis, e: Experiment) -> dict[str, Any]:
    steps = [row for peer in e.peers for row in peer.steps]
    rounds = [row for peer in e.peers for row in peer.rounds]
    wall = wall_seconds(e)
    samples = total(steps, "samples")
    losses = analysis.curves[e.experiment_id][1]
    target = analysis.targets[e.experiment_id]
    return {
        "experiment_id": e.experiment_id,
        "strategy": e.strategy,
        "peers": e.peer_count,
        "vcpus": e.settings.get("vcpus"),
        "model": e.settings.get("model"),
        "dataset": e.settings.get("dataset"),
        "batch_size": e.settings.get("batch_size"),
        "learning_rate": e.settings.get("learning_rate"),
        "target_batch_size": None if e.is_baseline else e.settings.get("target_batch_size"),
        "local_updates": None if e.is_baseline else e.settings.get("local_updates"),
        "complete": e.complete,
        "time_dilation": e.time_dilation,
        "scale_model": scale_model_caveat(e),
        # the compute its containers received over the calibration's, and its basis (received_compute.py)
        "received_compute": _received(e)[0],
        "received_compute_basis": _received(e)[1],
        # the validation passes' time the training clock leaves out, summed over the peers (modelled)
        "validation_seconds": _validation_seconds(e),
        "steps": len(steps),
        "samples": int(samples),
        "wall_seconds": wall,
        "samples_per_second": samples / wall if wall else None,
        "final_loss": losses[-1] if losses else None,
        "best_loss": min(losses) if losses else None,
        "target_loss": target,
        "time_to_target_seconds": time_to_target(analysis.curves[e.experiment_id], target),
        "best_accuracy": best_accuracy(e),
        "target_accuracy": analysis.accuracy_targets.get(e.experiment_id),
        "time_to_accuracy_seconds": time_to_accuracy(e, analysis.accuracy_targets.get(e.experiment_id)),
        # what the peers' interfaces sent per sample (all traffic), what Hivemind's own traffic sent (its
        # run totals) and the median link rate of its ok rounds (None where not counted): docs/network.md
        "sent_bytes_per_sample": sent_bytes_per_sample(e),
        "hivemind_bytes_per_sample": hivemind_bytes_per_sample(e),
        "link_mbit": link_mbit(e),
        # the median all-reduce of its ok gradient rounds (modelled s): what added delay lengthens
        "allreduce_seconds": median(
            [
                r["allreduce_seconds"]
                for r in rounds
                if r.get("kind") == "gradients"
                and r.get("outcome") == "ok"
                and r.get("allreduce_seconds") is not None
            ]
        ),
        # what else the machine did meanwhile: the cores its other processes took, the load at the end
        "host_other_cores": (e.host_load or {}).get("other_cores"),
        "host_load_end": ((e.host_load or {}).get("load_average_end") or [None])[0],
        "rounds_ok": sum(row.get("outcome") == "ok" for row in rounds),
        "rounds_failed": sum(row.get("outcome") not in (None, "ok") for row in rounds),
        # why they failed (rounds.csv `cause`; files written before it existed count as other)
        **{f"failed_{cause}": sum(_cause(row) == cause for row in rounds) for cause in ROUND_CAUSES},
    }


def _received(e: Experiment) -> tuple[float | None, str | None]:
    """The run's received compute against its calibration and its basis: experiment.json's, or for a
    calibrated run recorded before it was measured, its steps' modelled rate over its hosts' calibrated rates
    (``step rate, from the steps``: the steps after the warm-up without averaging, the mean of its peers'; a
    Hivemind peer's own processes' share is in it)."""
    if e.received_compute:
        return e.received_compute.get("ratio"), e.received_compute.get("basis")
    if not e.compute:
        return None, None
    hosts = list(e.hosts)
    ratios = []
    for peer in e.peers:
        host = peer.name if peer.name in e.hosts else (hosts[0] if len(hosts) == 1 else None)
        calibrated = (e.hosts.get(host) or {}).get("modelled_samples_per_second") if host else None
        steady = [row for row in peer.steps[2:] if not row.get("averaging_seconds")]
        seconds = sum(
            (row.get("compute_seconds") or 0.0) + (row.get("optimizer_seconds") or 0.0) for row in steady
        )
        if calibrated and seconds > 0:  # the rows are in modelled time: their rate is the modelled one
            ratios.append(sum(row.get("samples") or 0 for row in steady) / seconds / float(calibrated))
    return (statistics.fmean(ratios), "step rate, from the steps") if ratios else (None, None)


def _validation_seconds(e: Experiment) -> float | None:
    """The validation passes' time of every peer, summed (None where the files do not record it)."""
    passes = [row.get("eval_seconds") for peer in e.peers for row in peer.evals]
    known = [float(seconds) for seconds in passes if seconds is not None]
    return sum(known) if known else None


def scale_model_caveat(e: Experiment) -> str | None:
    """Why a dilated, calibrated run of Hivemind peers is outside the model's validated range (the largest
    peer decides), or None: other strategies, real VMs, runs the model was checked at."""
    if e.strategy != "hivemind" or e.time_dilation <= 1 or not e.compute:
        return None
    vcpus = {name: host.get("vcpus") for name, host in e.hosts.items()} or {"": e.settings.get("vcpus")}
    caveats = hivemind_model_caveats(vcpus, e.compute.get("hivemind_compute_factors") or {})
    return caveats[0] if caveats else None


def _cause(row: dict[str, Any]) -> str | None:
    """A round's failure cause (None for an ok round; other for files written before the column existed)."""
    if row.get("outcome") in (None, "ok"):
        return None
    return row.get("cause") or "other"
