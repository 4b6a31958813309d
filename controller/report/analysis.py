"""Build the report's tables from loaded experiments (definitions: controller/report/metrics.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from controller.calibration import Calibration, hivemind_model_caveats
from controller.report.data import Experiment
from controller.report.diagnosis import diagnosis_table, prediction_table
from controller.report.faults import faults_table
from controller.report.intervals import (
    comparisons_table,
    level_against_reference,
    mean_interval,
    noise_floor,
    noise_floor_table,
    repeats_table,
)
from controller.report.metrics import (
    Analysis,
    Table,
    bandwidth_bound,
    best_accuracy,
    default_accuracy_targets,
    default_targets,
    latency_seconds,
    loss_curve,
    median,
    merged_steps,
    model_bytes,
    scaling_efficiency,
    target_for,
    time_to_accuracy,
    time_to_target,
    total,
    wall_seconds,
)
from controller.report.timeouts import timeouts_table
from experiment.results import ROUND_CAUSES, percentile

BREAKDOWN_PARTS = ("data", "compute", "averaging", "optimizer_local", "other")
#: the averaging part split by where the steps waited (they sum to it): forming a group, the all-reduce
#: itself, a background round (local updates: the step waits for the round its epoch started), and the rest
#: (state averaging or download, waits no round accounts for)
AVERAGING_PARTS = ("matchmaking", "allreduce", "background_wait", "averaging_other")
EPOCH_PHASE_PARTS = ("step", "data", "compute", "optimizer", "averaging")  # steps.csv's <part>_seconds
EFFECT_FACTORS = ("target_batch_size", "local_updates", "peers", "batch_size", "learning_rate")
EFFECT_METRICS = (
    "time_to_target_seconds",
    "time_to_accuracy_seconds",
    "samples_per_second",
    "averaging_share",
    "final_loss",
)


def analyse(
    experiments: list[Experiment],
    *,
    target_loss: float | None,
    bandwidth: float | None,
    calibration: Calibration | None = None,
    target_accuracy: float | None = None,
) -> Analysis:
    """Compute every table. `target_loss` None: per group the baselines' worst final smoothed loss;
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
    analysis.tables["experiments"] = _table("experiments", "Experiments", list(rows.values()))
    analysis.tables["time_to_target"] = _time_to_target(analysis, rows)
    analysis.tables["repeats"] = repeats_table(experiments, rows)
    analysis.tables["peers"] = _peers(experiments)
    analysis.tables["noise_floor"] = noise_floor_table(experiments, rows, analysis.tables["peers"])
    floor = noise_floor(analysis.tables["noise_floor"])
    analysis.tables["comparisons"] = comparisons_table(experiments, rows, floor)
    analysis.tables["breakdown"] = _breakdown(experiments)
    analysis.tables["epoch_phases"] = _epoch_phases(experiments)
    analysis.tables["averaging"] = _averaging(analysis)
    analysis.tables["effects"] = _effects(analysis, rows)
    analysis.tables["strategies"] = _strategies(analysis, rows)
    analysis.tables["memory"] = _memory(analysis)
    analysis.tables["network"] = _network(analysis, rows)
    analysis.tables["diagnosis"] = diagnosis_table(analysis)
    analysis.tables["prediction"] = prediction_table(analysis, rows)
    analysis.tables["network_thresholds"] = _network_thresholds(analysis.tables["network"].rows)
    analysis.tables["faults"] = faults_table(experiments)
    analysis.tables["timeouts"] = timeouts_table(experiments, curves, rows)
    analysis.tables["preprocessing"] = _preprocessing(analysis, rows)
    return analysis


def _table(name: str, title: str, rows: list[dict[str, Any]], columns: tuple[str, ...] = ()) -> Table:
    if not columns:
        columns = tuple(dict.fromkeys(key for row in rows for key in row)) or ("experiment_id",)
    return Table(name, title, columns, rows)


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
        "rounds_ok": sum(row.get("outcome") == "ok" for row in rounds),
        "rounds_failed": sum(row.get("outcome") not in (None, "ok") for row in rounds),
        # why they failed (rounds.csv `cause`; files written before it existed count as other)
        **{f"failed_{cause}": sum(_cause(row) == cause for row in rounds) for cause in ROUND_CAUSES},
    }


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


def _strategies(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Every strategy against its baselines (same model, data, batch size and LR): throughput speedup
    S = X_N / X_1, scaling efficiency (``scaling_efficiency``: S per vCPU), time-to-target speedup,
    communication share, memory per peer."""
    targets = {row["experiment_id"]: row for row in analysis.tables["time_to_target"].rows}
    shares = {row["experiment_id"]: row for row in analysis.tables["breakdown"].rows}
    table = []
    for e in analysis.experiments:
        memory = [peer.summary.get("memory") or {} for peer in e.peers]
        peak = [m["peak_rss_bytes"] for m in memory if m.get("peak_rss_bytes")]
        state = [m["optimizer_state_bytes"] for m in memory if m.get("optimizer_state_bytes") is not None]
        speedup = None if e.is_baseline else targets[e.experiment_id]["throughput_speedup"]
        table.append(
            {
                "experiment_id": e.experiment_id,
                "strategy": e.strategy_label(),
                "setting": e.label(),
                "peers": e.peer_count,
                "samples_per_second": rows[e.experiment_id]["samples_per_second"],
                "throughput_speedup": speedup,
                "ceiling_speedup": None if e.is_baseline else targets[e.experiment_id]["ceiling_speedup"],
                "efficiency": None if e.is_baseline else targets[e.experiment_id]["throughput_efficiency"],
                "time_to_target_speedup": None if e.is_baseline else targets[e.experiment_id]["speedup"],
                "communication_share": shares[e.experiment_id]["averaging_share"],
                "sent_bytes_per_sample": sent_bytes_per_sample(e),
                "peak_rss_mb_max": max(peak) / 1e6 if peak else None,
                "optimizer_state_mb_max": max(state) / 1e6 if state else None,
            }
        )
    table.sort(key=lambda row: (row["strategy"] != "baseline", row["strategy"], row["peers"]))
    columns = (
        *("experiment_id", "strategy", "setting", "peers", "samples_per_second", "throughput_speedup"),
        *(
            "ceiling_speedup",
            "efficiency",
            "time_to_target_speedup",
            "communication_share",
            "sent_bytes_per_sample",
            "peak_rss_mb_max",
        ),
        "optimizer_state_mb_max",
    )
    title = (
        "Strategies side by side: speedup S = X_N / X_1 and scaling efficiency (S per vCPU) against the "
        "baselines, bytes sent per sample, memory"
    )
    return _table("strategies", title, table, columns)


def sent_bytes_per_sample(e: Experiment) -> float | None:
    """Bytes the peers sent (their interfaces' counters, summary.json ``network``) over the samples they
    trained, of the peers that counted them (a killed peer wrote no count); None when none did."""
    counted = [peer for peer in e.peers if peer.summary.get("network")]
    samples = total([row for peer in counted for row in peer.steps], "samples")
    return sum(peer.summary["network"]["sent_bytes"] for peer in counted) / samples if samples else None


MEMORY_KINDS = ("parameter", "gradient", "optimizer_state")


def _memory(analysis: Analysis) -> Table:
    """What one rank (peer) holds, per run: parameters, gradients and optimizer state (the largest of its
    peers: shards can differ by a few bytes of padding) and the peak resident set size, beside the same of
    the run's baselines (summary.json ``memory``)."""
    table = []
    for e in analysis.experiments:
        profiles = [peer.summary.get("memory") or {} for peer in e.peers]
        if e.is_noise_floor or not profiles or not all(profiles):
            continue
        row: dict[str, Any] = {
            "experiment_id": e.experiment_id,
            "strategy": e.strategy_label(),
            "peers": e.peer_count,
            "model": e.settings.get("model"),
            "optimizer": e.settings.get("optimizer"),
        }
        for kind in MEMORY_KINDS:
            values = [p.get(f"{kind}_bytes") for p in profiles]
            row[f"{kind}_mb"] = max(values) / 1e6 if all(v is not None for v in values) else None
        row["peak_rss_mb"] = max(p.get("peak_rss_bytes") or 0 for p in profiles) / 1e6
        table.append(row)
    table.sort(key=lambda row: (str(row["model"]), str(row["optimizer"]), row["peers"], row["strategy"]))
    title = "Memory per rank: parameters, gradients and optimizer state held, and the peak RSS"
    return _table("memory", title, table)


def _time_to_target(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    baselines: dict[tuple[Any, ...], list[Experiment]] = defaultdict(list)
    for e in analysis.experiments:
        if e.is_baseline:
            baselines[e.comparison_key()].append(e)
    table = []
    for e in analysis.experiments:
        if e.is_baseline:
            continue
        row = rows[e.experiment_id]
        matching = baselines.get(e.comparison_key(), [])
        base_times = [rows[b.experiment_id]["time_to_target_seconds"] for b in matching]
        base_times = [t for t in base_times if t is not None]
        base_rates = [rows[b.experiment_id]["samples_per_second"] for b in matching]
        base_rates = [r for r in base_rates if r]
        base_time = median(base_times)
        hm_time = row["time_to_target_seconds"]
        speedup = base_time / hm_time if base_time is not None and hm_time else None
        base_accuracy_time = median(
            [t for b in matching if (t := rows[b.experiment_id]["time_to_accuracy_seconds"]) is not None]
        )
        accuracy_time = row["time_to_accuracy_seconds"]
        base_vcpus = [b.total_vcpus for b in matching if b.total_vcpus]
        efficiency = scaling_efficiency(speedup, e.total_vcpus, median(base_vcpus))
        rate = row["samples_per_second"]
        throughput_speedup = rate / median(base_rates) if rate and base_rates else None
        table.append(
            {
                "experiment_id": e.experiment_id,
                "setting": e.label(),
                "batch_size": row["batch_size"],
                "learning_rate": row["learning_rate"],
                "target_loss": row["target_loss"],
                "baselines": len(matching),
                "baseline_time_s": base_time,
                "baseline_time_min_s": min(base_times) if base_times else None,
                "baseline_time_max_s": max(base_times) if base_times else None,
                "hivemind_time_s": hm_time,
                "speedup": speedup,
                "scaling_efficiency": efficiency,
                "throughput_speedup": throughput_speedup,
                # not a column: the strategies table's efficiency, from the same definition
                "throughput_efficiency": scaling_efficiency(
                    throughput_speedup, e.total_vcpus, median(base_vcpus)
                ),
                "ceiling_speedup": ceiling_speedup(analysis.calibration, e, matching),
                "target_accuracy": row["target_accuracy"],
                "baseline_time_to_accuracy_s": base_accuracy_time,
                "time_to_accuracy_s": accuracy_time,
                "accuracy_speedup": (
                    base_accuracy_time / accuracy_time
                    if base_accuracy_time is not None and accuracy_time
                    else None
                ),
            }
        )
    columns = (
        *("experiment_id", "setting", "batch_size", "learning_rate", "target_loss", "baselines"),
        *("baseline_time_s", "baseline_time_min_s", "baseline_time_max_s", "hivemind_time_s"),
        *("speedup", "scaling_efficiency", "throughput_speedup", "ceiling_speedup"),
        *("target_accuracy", "baseline_time_to_accuracy_s", "time_to_accuracy_s", "accuracy_speedup"),
    )
    title = "Time to target loss and to target accuracy, speedup and scaling efficiency"
    return _table("time_to_target", title, table, columns)


def ceiling_speedup(
    calibration: Calibration | None, e: Experiment, baselines: list[Experiment]
) -> float | None:
    """The throughput speedup `e` would reach if averaging cost nothing: its peers' calibrated samples/s
    (each at its own vCPUs, experiment.json's hosts) over the median baseline's (issue #33)."""
    if calibration is None or not baselines:
        return None
    model, batch_size = e.settings.get("model"), e.settings.get("batch_size")
    if not isinstance(model, str) or not isinstance(batch_size, int):
        return None
    peer_vcpus = [host.get("vcpus") for host in e.hosts.values()] or [e.settings.get("vcpus")] * e.peer_count
    ceilings = [
        calibration.ceiling(model, batch_size, peer_vcpus, b.settings.get("vcpus"))
        for b in baselines
        if None not in peer_vcpus and b.settings.get("vcpus") is not None
    ]
    return median([c for c in ceilings if c is not None])


def averaging_split(e: Experiment, averaging: float) -> dict[str, float]:
    """Seconds of the steps' averaging wait (``averaging``, summed over steps) by AVERAGING_PARTS, from the
    rounds the steps waited for (rounds.csv ``blocking_seconds``). A round that ran in the background
    (Hivemind with local updates) is a background wait; a round the step waited through is its all-reduce
    (the round's last phase, so a wait up to its length) and then its matchmaking. Waits no round accounts
    for are averaging_other; rounds that claim more than the steps waited are scaled down to it.

    >>> from pathlib import Path
    >>> rounds = [{"blocking_seconds": 3.0, "matchmaking_seconds": 2.0, "allreduce_seconds": 0.5},
    ...           {"blocking_seconds": 2.0, "matchmaking_seconds": 2.0, "allreduce_seconds": None}]
    >>> peer = type("Peer", (), {"rounds": rounds})()
    >>> e = Experiment("hm", Path("hm"), {"strategy": "hivemind", "local_updates": False}, True, [peer])
    >>> averaging_split(e, 6.0)  # 0.5 s all-reduce, 2 + 2 matchmaking; the rest no round's phases explain
    {'matchmaking': 4.0, 'allreduce': 0.5, 'background_wait': 0.0, 'averaging_other': 1.5}
    >>> e.settings["local_updates"] = True
    >>> averaging_split(e, 4.0)  # the rounds claim 5 s of 4: scaled down
    {'matchmaking': 0.0, 'allreduce': 0.0, 'background_wait': 4.0, 'averaging_other': 0.0}
    """
    background = e.settings.get("strategy") == "hivemind" and bool(e.settings.get("local_updates"))
    parts = dict.fromkeys(AVERAGING_PARTS, 0.0)
    for peer in e.peers:
        for round_ in peer.rounds:
            blocked = round_.get("blocking_seconds") or 0.0
            if blocked <= 0:
                continue
            if background:
                parts["background_wait"] += blocked
                continue
            in_allreduce = min(blocked, round_.get("allreduce_seconds") or 0.0)
            parts["allreduce"] += in_allreduce
            parts["matchmaking"] += min(blocked - in_allreduce, round_.get("matchmaking_seconds") or 0.0)
    explained = sum(parts.values())
    if explained > averaging > 0 or averaging <= 0:
        scale = averaging / explained if explained > 0 and averaging > 0 else 0.0
        parts = {part: seconds * scale for part, seconds in parts.items()}
    parts["averaging_other"] = max(0.0, averaging - sum(parts.values()))
    return parts


def breakdown_row(e: Experiment) -> dict[str, Any]:
    """Summed step-time components over all steps of all peers, per-step means (ms) and shares."""
    steps = [row for peer in e.peers for row in peer.steps]
    sums = {
        "data": total(steps, "data_seconds"),
        "compute": total(steps, "compute_seconds"),
        "averaging": total(steps, "averaging_seconds"),
        "optimizer_local": total(steps, "optimizer_seconds") - total(steps, "averaging_seconds"),
    }
    step_total = total(steps, "step_seconds")
    residual = step_total - sum(sums.values())
    # the parts sum to the step up to float error: that error is 0, not "-1.652e-12 ms" (a real gap is not)
    sums["other"] = residual if abs(residual) > 1e-9 * max(step_total, 1.0) else 0.0
    row: dict[str, Any] = {"experiment_id": e.experiment_id, "setting": e.label(), "steps": len(steps)}
    row["step_ms"] = 1000 * step_total / len(steps) if steps else None
    for part in BREAKDOWN_PARTS:
        row[f"{part}_ms"] = 1000 * sums[part] / len(steps) if steps else None
    for part in BREAKDOWN_PARTS:
        row[f"{part}_share"] = sums[part] / step_total if step_total else None
    split = averaging_split(e, sums["averaging"])
    for part in AVERAGING_PARTS:
        row[f"{part}_ms"] = 1000 * split[part] / len(steps) if steps else None
        row[f"{part}_share"] = split[part] / step_total if step_total else None
    return row


def _breakdown(experiments: list[Experiment]) -> Table:
    columns = (
        "experiment_id",
        "setting",
        "steps",
        "step_ms",
        *(f"{part}_ms" for part in BREAKDOWN_PARTS),
        *(f"{part}_share" for part in BREAKDOWN_PARTS),
        *(f"{part}_ms" for part in AVERAGING_PARTS),
        *(f"{part}_share" for part in AVERAGING_PARTS),
    )
    rows = [breakdown_row(e) for e in experiments]
    return _table("breakdown", "Step-time breakdown (mean per step over all peers)", rows, columns)


def epoch_phase_rows(e: Experiment) -> list[dict[str, Any]]:
    """A Hivemind run's steps (all peers) in three phases by their Hivemind epoch: the first epoch, the middle
    ones and the last two. Per-step means (ms) show whether the run's edges (start, finish) distort it."""
    steps = [row for peer in e.peers for row in peer.steps if row.get("hivemind_epoch") is not None]
    epochs = sorted({int(row["hivemind_epoch"]) for row in steps})
    if e.is_baseline or len(epochs) < 4:
        return []
    phases = {"first": epochs[:1], "middle": epochs[1:-2], "last two": epochs[-2:]}
    rows = []
    for phase, members in phases.items():
        chosen = [row for row in steps if int(row["hivemind_epoch"]) in members]
        row: dict[str, Any] = {"experiment_id": e.experiment_id, "phase": phase}
        row.update(epochs=f"{members[0]}-{members[-1]}", steps=len(chosen))
        for part in EPOCH_PHASE_PARTS:
            row[f"{part}_ms"] = 1000 * total(chosen, f"{part}_seconds") / len(chosen) if chosen else None
        rows.append(row)
    return rows


def _epoch_phases(experiments: list[Experiment]) -> Table:
    columns = ("experiment_id", "phase", "epochs", "steps", *(f"{part}_ms" for part in EPOCH_PHASE_PARTS))
    rows = [row for e in experiments for row in epoch_phase_rows(e)]
    title = "Run edges: first epoch, middle epochs, last two epochs (mean per step over all peers)"
    return _table("epoch_phases", title, rows, columns)


def _averaging(analysis: Analysis) -> Table:
    rows = []
    for e in analysis.experiments:
        if e.is_baseline:
            continue
        rounds = [row for peer in e.peers for row in peer.rounds]
        analysis.round_samples[e.experiment_id] = rounds
        m_bytes = analysis.model_bytes.get(str(e.settings.get("model")))
        bandwidth = analysis.bandwidth or e.bandwidth_bytes_per_second
        for kind in sorted({row.get("kind") for row in rounds if row.get("kind")}):
            ok = [r for r in rounds if r.get("kind") == kind and r.get("outcome") == "ok"]
            allreduce = [r["allreduce_seconds"] for r in ok if r.get("allreduce_seconds") is not None]
            matchmaking = [r["matchmaking_seconds"] for r in ok if r.get("matchmaking_seconds") is not None]
            groups = [r["group_size"] for r in ok if r.get("group_size")]
            group = int(median(groups)) if groups else e.peer_count
            bound = (
                bandwidth_bound(group, m_bytes, bandwidth, latency_seconds(e))
                if m_bytes and bandwidth and group > 1
                else None
            )
            middle = median(allreduce)
            moved = 2 * (group - 1) / group * m_bytes if m_bytes and group > 1 else None
            rows.append(
                {
                    "experiment_id": e.experiment_id,
                    "setting": e.label(),
                    "peers": e.peer_count,
                    "kind": kind,
                    "rounds_ok": len(ok),
                    "rounds_not_ok": sum(r.get("kind") == kind and r.get("outcome") != "ok" for r in rounds),
                    "group_size": group,
                    "matchmaking_median_s": median(matchmaking),
                    "allreduce_median_s": middle,
                    "allreduce_p95_s": percentile(allreduce, 0.95),
                    "model_bytes": m_bytes,
                    "bandwidth_bytes_per_s": bandwidth,
                    "lower_bound_s": bound,
                    "allreduce_over_bound": middle / bound if middle is not None and bound else None,
                    "effective_bandwidth_bytes_per_s": moved / middle if moved and middle else None,
                }
            )
    columns = (
        *("experiment_id", "setting", "peers", "kind", "rounds_ok", "rounds_not_ok", "group_size"),
        *("matchmaking_median_s", "allreduce_median_s", "allreduce_p95_s", "model_bytes"),
        *(
            "bandwidth_bytes_per_s",
            "lower_bound_s",
            "allreduce_over_bound",
            "effective_bandwidth_bytes_per_s",
        ),
    )
    return _table("averaging", "Averaging time per round against the bandwidth lower bound", rows, columns)


#: what varies with a factor by design and so is not held equal when its effect is measured: the study gives
#: the peers a fixed budget of vCPUs (16 / peers each)
EFFECT_COVARIES = {"peers": ("vcpus",)}


def _effect_cell(e: Experiment, factor: str) -> tuple[tuple[str, Any], ...]:
    """The runs a factor's levels are compared within: equal in every other variable that defines a
    setting."""
    ignored = (factor, *EFFECT_COVARIES.get(factor, ()))
    return tuple(item for item in e.setting_key() if item[0] not in ignored)


def _effects(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """A factor's effect, measured only between runs that differ in it alone (issue #52): per factor, the
    runs are split into cells equal in every other setting; within each cell with two levels or more, one row
    per level, strategy and metric with every run's value, the t-interval of the mean and the level against
    the cell's first level (the reference) with a verdict. A level that shares no cell with another level is
    confounded: its row names the settings that differ too, and gives no ratio."""
    shares = {row["experiment_id"]: row["averaging_share"] for row in analysis.tables["breakdown"].rows}

    def value(e: Experiment, metric: str) -> float | None:
        v = shares[e.experiment_id] if metric == "averaging_share" else rows[e.experiment_id][metric]
        return v if v is not None and math.isfinite(v) else None

    table = []
    for factor in EFFECT_FACTORS:
        # Hivemind's own factors among Hivemind runs; peers among the strategies with peers; batch size and
        # LR among all; never the grid's noise floor (a measurement of the testbed)
        subset = [
            e
            for e in analysis.experiments
            if not e.is_noise_floor
            and (
                factor in ("batch_size", "learning_rate")
                or (factor == "peers" and not e.is_baseline)
                or e.strategy == "hivemind"
            )
        ]
        cells: dict[tuple[Any, ...], dict[Any, list[Experiment]]] = defaultdict(lambda: defaultdict(list))
        for e in subset:
            level = e.peer_count if factor == "peers" else dict(e.setting_key()).get(factor)
            if level is not None:
                cells[_effect_cell(e, factor)][level].append(e)
        matched = {level for levels in cells.values() if len(levels) > 1 for level in levels}
        for levels in cells.values():
            ordered = sorted(levels, key=lambda level: (str(type(level)), level))
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
        "Effects of TBS, local updates, peers, batch size and LR, each between runs that differ in it alone"
    )
    return _table("effects", title, table, columns)


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


def epoch_arrivals(steps: list[dict[str, Any]]) -> dict[int, float]:
    """When a peer reached each epoch's end: per epoch e, the wall time at which the step that moved it to
    e + 1 began to wait for averaging (the step's end minus its averaging time).

    >>> epoch_arrivals([{"hivemind_epoch": 0, "wall_seconds": 1.0, "averaging_seconds": 0.0},
    ...                 {"hivemind_epoch": 1, "wall_seconds": 5.0, "averaging_seconds": 3.0},
    ...                 {"hivemind_epoch": 1, "wall_seconds": 6.0, "averaging_seconds": 0.0}])
    {0: 2.0}
    """
    arrivals: dict[int, float] = {}
    previous: int | None = None
    for row in steps:
        epoch = row.get("hivemind_epoch")
        if epoch is None or row.get("wall_seconds") is None:
            continue
        if previous is not None and int(epoch) > previous:
            arrivals[previous] = float(row["wall_seconds"]) - float(row.get("averaging_seconds") or 0.0)
        previous = int(epoch)
    return arrivals


def hivemind_cpu_share(cpu_received: dict[str, Any] | None) -> float | None:
    """The share of a peer's CPU over the training that went to Hivemind's own processes (DHT, p2pd,
    averagers) rather than the training loop's; None where the summary has no split.

    >>> hivemind_cpu_share({"process_tree_by_role": {"trainer": 6.0, "dht": 1.0, "p2pd": 3.0}})
    0.4
    """
    split = (cpu_received or {}).get("process_tree_by_role") or {}
    everything = sum(split.values())
    return round(1.0 - split.get("trainer", 0.0) / everything, 4) if everything > 0 else None


def peer_rows(e: Experiment) -> list[dict[str, Any]]:
    """A Hivemind run's peers: what each contributed and who waited for whom at the epoch boundaries.

    At every epoch that all peers ended, the last to arrive is the one the others waited for; each peer's wait
    is the last arrival minus its own. ``last_arrivals`` counts the epochs a peer was the last.
    """
    if e.is_baseline:
        return []
    arrivals = {peer.name: epoch_arrivals(peer.steps) for peer in e.peers}
    shared = set.intersection(*(set(a) for a in arrivals.values())) if arrivals else set()
    last = {epoch: max(arrivals, key=lambda name: arrivals[name][epoch]) for epoch in shared}
    total_samples = sum(total(peer.steps, "samples") for peer in e.peers)
    rows = []
    for peer in e.peers:
        steps, host = peer.steps, e.hosts.get(peer.name) or {}
        samples = total(steps, "samples")
        wall = max(
            (float(row["wall_seconds"]) for row in steps if row.get("wall_seconds") is not None), default=0
        )
        waits = [arrivals[last[epoch]][epoch] - arrivals[peer.name][epoch] for epoch in sorted(shared)]
        rows.append(
            {
                "experiment_id": e.experiment_id,
                "peer": peer.name,
                "vcpus": host.get("vcpus"),
                # the rate of the VM link it models, and the rate the local link was shaped to (/ D)
                "modelled_bandwidth_mbit": host.get("modelled_bandwidth_mbit", host.get("bandwidth_mbit")),
                "applied_bandwidth_mbit": host.get("bandwidth_mbit"),
                "cores_used": (host.get("cpu_received") or {}).get("cores_used"),
                "cores_under_load": (host.get("cpu_probe") or {}).get("cores_used"),
                "hivemind_cpu_share": hivemind_cpu_share(host.get("cpu_received")),
                "steps": len(steps),
                "samples": int(samples),
                "contribution": samples / total_samples if total_samples else None,
                "samples_per_second": samples / wall if wall else None,
                "compute_ms": 1000 * total(steps, "compute_seconds") / len(steps) if steps else None,
                "averaging_ms": 1000 * total(steps, "averaging_seconds") / len(steps) if steps else None,
                "epochs_ended": len(shared),
                "last_arrivals": sum(name == peer.name for name in last.values()),
                "mean_wait_for_others_s": sum(waits) / len(waits) if waits else None,
            }
        )
    return rows


def _peers(experiments: list[Experiment]) -> Table:
    columns = (
        *("experiment_id", "peer", "vcpus", "modelled_bandwidth_mbit", "applied_bandwidth_mbit"),
        *("cores_used", "cores_under_load", "hivemind_cpu_share", "steps", "samples"),
        *("contribution", "samples_per_second", "compute_ms", "averaging_ms", "epochs_ended"),
        *("last_arrivals", "mean_wait_for_others_s"),
    )
    rows = [row for e in experiments for row in peer_rows(e)]
    title = "Peers: each one's contribution, and who waited for whom at the epoch boundaries"
    return _table("peers", title, rows, columns)


#: the step-time parts a run can be bound by, as the network table names them
BOUND_PARTS = ("data", "compute", "averaging")


def _network(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Hivemind runs on shaped links (``bandwidth_mbit`` set): the step-time shares at each link rate and the
    part that bounds the run (the largest of data loading, compute, averaging)."""
    breakdown = {row["experiment_id"]: row for row in analysis.tables["breakdown"].rows}
    table = []
    for e in analysis.experiments:
        rate = e.settings.get("bandwidth_mbit")
        if e.is_baseline or not rate:
            continue
        shares = {part: breakdown[e.experiment_id][f"{part}_share"] for part in BOUND_PARTS}
        known = {part: share for part, share in shares.items() if share is not None}
        table.append(
            {
                "experiment_id": e.experiment_id,
                "setting": e.label(),
                "peers": e.peer_count,
                "bandwidth_mbit": float(rate),
                "measured_mbit": e.bandwidth_bytes_per_second * 8 / 1e6
                if e.bandwidth_bytes_per_second
                else None,
                **{f"{part}_share": share for part, share in shares.items()},
                "samples_per_second": rows[e.experiment_id]["samples_per_second"],
                "bound": max(known, key=known.__getitem__) if known else None,
            }
        )
    table.sort(key=lambda row: (row["setting"].rsplit(" ", 1)[0], row["peers"], row["bandwidth_mbit"]))
    columns = (
        *("experiment_id", "setting", "peers", "bandwidth_mbit", "measured_mbit"),
        *(f"{part}_share" for part in BOUND_PARTS),
        *("samples_per_second", "bound"),
    )
    return _table("network", "Shaped links: step-time shares per link rate", table, columns)


def _preprocessing(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Runs that chose a data pipeline (an image folder's preprocessing, or data workers): throughput and
    data-loading share per strategy, and each one's speed against the slowest of its model and dataset."""
    breakdown = {row["experiment_id"]: row for row in analysis.tables["breakdown"].rows}
    table = []
    for e in analysis.experiments:
        preprocessing, workers = e.data_pipeline()
        if not preprocessing and not workers:
            continue
        parts = breakdown[e.experiment_id]
        table.append(
            {
                "experiment_id": e.experiment_id,
                "strategy": e.strategy,
                "peers": e.peer_count,
                "model": e.settings.get("model"),
                "dataset": e.settings.get("dataset"),
                "preprocessing": preprocessing,
                "data_workers": workers,
                "samples_per_second": rows[e.experiment_id]["samples_per_second"],
                "data_ms": parts["data_ms"],
                "compute_ms": parts["compute_ms"],
                "data_share": parts["data_share"],
                "speed_vs_slowest": None,
            }
        )
    for members in _by_model(table):
        slowest = members[0]["samples_per_second"]
        for row in members:
            row["speed_vs_slowest"] = row["samples_per_second"] / slowest
    table.sort(
        key=lambda row: (str(row["model"]), str(row["dataset"]), row["preprocessing"], row["data_workers"])
    )
    title = "Preprocessing strategies: throughput and data-loading share"
    return _table("preprocessing", title, table)


def _by_model(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows with a measured throughput, per model and dataset, slowest first."""
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if is_number(row["samples_per_second"]) and row["samples_per_second"] > 0:
            groups[row["model"], row["dataset"]].append(row)
    return [sorted(members, key=lambda row: row["samples_per_second"]) for members in groups.values()]


def preprocessing_factors(table: Table) -> list[str]:
    """One line per model and dataset: the factor between its slowest and fastest data pipeline.

    >>> rows = [{"model": "m", "dataset": "d", "preprocessing": "decode", "data_workers": 0,
    ...          "samples_per_second": 100.0}, {"model": "m", "dataset": "d", "preprocessing": "cached",
    ...          "data_workers": 0, "samples_per_second": 320.0}]
    >>> preprocessing_factors(Table("preprocessing", "", ("model",), rows))
    ['m on d: 3.20x between the slowest (decode, 0 workers) and the fastest (cached, 0 workers)']
    """
    lines = []
    for members in _by_model(table.rows):
        slow, fast = members[0], members[-1]
        if slow is fast:
            continue
        factor = fast["samples_per_second"] / slow["samples_per_second"]
        lines.append(
            f"{slow['model']} on {slow['dataset']}: {factor:.2f}x between the slowest ({_pipeline(slow)}) "
            f"and the fastest ({_pipeline(fast)})"
        )
    return lines


def _pipeline(row: dict[str, Any]) -> str:
    return f"{row['preprocessing'] or 'in memory'}, {row['data_workers']} workers"


def _network_thresholds(network: list[dict[str, Any]]) -> Table:
    """Per setting without its link rate: the rates where averaging bounds the run, and the highest of them.

    >>> rows = [{"setting": "2p tbs64 noLU 10Mbit", "peers": 2, "bandwidth_mbit": 10.0, "bound": "averaging",
    ...          "averaging_share": 0.8, "samples_per_second": 5.0},
    ...         {"setting": "2p tbs64 noLU 100Mbit", "peers": 2, "bandwidth_mbit": 100.0, "bound": "compute",
    ...          "averaging_share": 0.3, "samples_per_second": 20.0}]
    >>> row = _network_thresholds(rows).rows[0]
    >>> [row[k] for k in ("communication_bound_mbit", "communication_bound_up_to_mbit")]
    ['10', 10.0]
    >>> row["not_communication_bound_from_mbit"]
    100.0
    """
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in network:
        groups[row["setting"].rsplit(" ", 1)[0], row["peers"]].append(row)
    table = []
    for (setting, peers), members in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        members.sort(key=lambda row: row["bandwidth_mbit"])
        bound = [row["bandwidth_mbit"] for row in members if row["bound"] == "averaging"]
        not_bound = [row["bandwidth_mbit"] for row in members if row["bound"] not in (None, "averaging")]
        above = [rate for rate in not_bound if not bound or rate > max(bound)]
        table.append(
            {
                "setting": setting,
                "peers": peers,
                "rates_mbit": " ".join(f"{row['bandwidth_mbit']:g}" for row in members),
                "averaging_shares": " ".join(_fmt_share(row["averaging_share"]) for row in members),
                "communication_bound_mbit": " ".join(f"{rate:g}" for rate in bound),
                "communication_bound_up_to_mbit": max(bound) if bound else None,
                "not_communication_bound_from_mbit": min(above) if above else None,
            }
        )
    columns = (
        *("setting", "peers", "rates_mbit", "averaging_shares", "communication_bound_mbit"),
        *("communication_bound_up_to_mbit", "not_communication_bound_from_mbit"),
    )
    title = "Where Hivemind turns communication-bound (averaging the largest share of step time)"
    return _table("network_thresholds", title, table, columns)


def _fmt_share(share: float | None) -> str:
    return "-" if share is None else f"{share:.2f}"


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


__all__ = [
    "AVERAGING_PARTS",
    "Analysis",
    "analyse",
    "averaging_split",
    "breakdown_row",
    "merged_steps",
    "is_number",
    "preprocessing_factors",
]
