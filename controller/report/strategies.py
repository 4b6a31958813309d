"""The strategies side by side (speedup over the baseline against the no-communication ceiling) and the
time to the target loss."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from controller.calibration import Calibration
from controller.report.data import Experiment
from controller.report.metrics import (
    Analysis,
    Table,
    make_table,
    median,
    scaling_efficiency,
)
from controller.report.network import sent_bytes_per_sample


def strategies_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
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
    return make_table("strategies", title, table, columns)


def time_to_target_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
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
    return make_table("time_to_target", title, table, columns)


def ceiling_speedup(
    calibration: Calibration | None, e: Experiment, baselines: list[Experiment]
) -> float | None:
    """The throughput speedup `e` would reach if averaging cost nothing: its peers' calibrated samples/s
    (each at its own vCPUs, experiment.json's hosts) over the median baseline's."""
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
