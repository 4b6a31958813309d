"""What the links carried and where they bound: bytes per sample, the bandwidth-bound share, the rates at
which averaging would stop binding, and the data pipeline's (preprocessing) share."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from controller.report.data import Experiment
from controller.report.faults import fault_windows
from controller.report.intervals import paired_ratio_interval, verdict
from controller.report.metrics import (
    Analysis,
    Table,
    is_number,
    make_table,
    total,
)

#: the step-time parts a run can be bound by, as the network table names them
BOUND_PARTS = ("data", "compute", "averaging")


def sent_bytes_per_sample(e: Experiment) -> float | None:
    """Bytes the peers sent (their interfaces' counters, summary.json ``network``) over the samples they
    trained, of the peers that counted them (a killed peer wrote no count); None when none did."""
    counted = [peer for peer in e.peers if peer.summary.get("network")]
    samples = total([row for peer in counted for row in peer.steps], "samples")
    return sum(peer.summary["network"]["sent_bytes"] for peer in counted) / samples if samples else None


def run_traffic(peer: Any) -> dict[str, int] | None:
    """The peer's Hivemind bytes over its whole run (summary.json ``strategy_details.traffic``, read at the
    start barrier and when the peer was done: trainer/traffic.py), or None (not counted, an older run)."""
    return (peer.summary.get("strategy_details") or {}).get("traffic")


def hivemind_bytes_per_sample(e: Experiment) -> float | None:
    """Bytes the peers' Hivemind traffic sent over the run (its exact totals) per sample those peers trained;
    None where no peer has a total."""
    counted = [peer for peer in e.peers if run_traffic(peer)]
    samples = total([row for peer in counted for row in peer.steps], "samples")
    return sum(run_traffic(peer)["sent_bytes"] for peer in counted) / samples if samples else None


def link_mbit(e: Experiment) -> float | None:
    """The median link rate of the run's ok counted rounds, every peer's (modelled Mbit/s; None: none)."""
    rates = [r["sent_mbit_per_second"] for peer in e.peers for r in _counted(peer.rounds)]
    return statistics.median(rates) if rates else None


def network_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
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
                # the delay asked for (one way) and the round trip the probe measured, both modelled
                "latency_ms": float(e.settings.get("latency_ms") or 0.0),
                "round_trip_ms": e.round_trip_ms,
                **{f"{part}_share": share for part, share in shares.items()},
                "samples_per_second": rows[e.experiment_id]["samples_per_second"],
                "bound": max(known, key=known.__getitem__) if known else None,
            }
        )
    table.sort(key=lambda row: (row["setting"].rsplit(" ", 1)[0], row["peers"], row["bandwidth_mbit"]))
    columns = (
        *(
            "experiment_id",
            "setting",
            "peers",
            "bandwidth_mbit",
            "measured_mbit",
            "latency_ms",
            "round_trip_ms",
        ),
        *(f"{part}_share" for part in BOUND_PARTS),
        *("samples_per_second", "bound"),
    )
    return make_table("network", "Shaped links: step-time shares per link rate", table, columns)


def network_thresholds_table(network: list[dict[str, Any]]) -> Table:
    """Per setting without its link rate: the rates where averaging bounds the run, and the highest of them.

    >>> rows = [{"setting": "2p tbs64 noLU 10Mbit", "peers": 2, "bandwidth_mbit": 10.0, "bound": "averaging",
    ...          "averaging_share": 0.8, "samples_per_second": 5.0},
    ...         {"setting": "2p tbs64 noLU 100Mbit", "peers": 2, "bandwidth_mbit": 100.0, "bound": "compute",
    ...          "averaging_share": 0.3, "samples_per_second": 20.0}]
    >>> row = network_thresholds_table(rows).rows[0]
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
    return make_table("network_thresholds", title, table, columns)


def preprocessing_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
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
    return make_table("preprocessing", title, table)


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


def _fmt_share(share: float | None) -> str:
    return "-" if share is None else f"{share:.2f}"


def shaped_mbit(e: Experiment, peer: str) -> float | None:
    """The rate the peer's link was shaped to, as the modelled machine had it (None: unshaped)."""
    plan = e.hosts.get(peer) or {}
    rate = plan.get("modelled_bandwidth_mbit") or plan.get("bandwidth_mbit")
    rate = rate or e.settings.get("bandwidth_mbit")
    return float(rate) if rate else None


def _counted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ok rounds whose bytes were counted and whose all-reduce took time: those with a link rate."""
    return [
        r
        for r in rows
        if r.get("outcome") == "ok" and r.get("sent_bytes") is not None and r.get("sent_mbit_per_second")
    ]


def _cross_windows(e: Experiment) -> list[dict[str, Any]]:
    """The run's applied cross-traffic windows (faults of kind cross), with their end (healed_at)."""
    return [w for w in fault_windows(e) if w["kind"] == "cross" and w.get("healed_at") is not None]


def _inside(row: dict[str, Any], window: dict[str, Any]) -> bool:
    """Whether the round ended inside the window, on one of its two hosts."""
    return float(window["applied_at"]) <= row["timestamp"] <= float(window["healed_at"])


def round_rates_table(analysis: Analysis) -> Table:
    """Every counted round's bytes and link rate (modelled Mbit/s: the bytes this peer's Hivemind traffic sent
    during the all-reduce, over its modelled seconds), against the peer's shaped rate; ``under_half`` marks a
    round that got less than half of it, ``cross_traffic`` one that ended inside a cross-traffic window from
    or to its peer (None: the run had none)."""
    table = []
    for e in analysis.experiments:
        windows = _cross_windows(e)
        for peer in e.peers:
            shaped = shaped_mbit(e, peer.name)
            mine = [w for w in windows if peer.name in (w["host"], w.get("target"))]
            for r in _counted(peer.rounds):
                rate = r["sent_mbit_per_second"]
                table.append(
                    {
                        "experiment_id": e.experiment_id,
                        "peer": peer.name,
                        **{name: r.get(name) for name in ROUND_RATE_FIELDS},
                        "shaped_mbit": shaped,
                        "under_half": None if shaped is None else rate < shaped / 2,
                        "cross_traffic": any(_inside(r, w) for w in mine) if windows else None,
                    }
                )
    columns = ("experiment_id", "peer", *ROUND_RATE_FIELDS, "shaped_mbit", "under_half", "cross_traffic")
    return make_table("round_rates", "Link rate per round", table, columns)


ROUND_RATE_FIELDS = (
    *("round", "epoch", "kind", "group_size", "sent_bytes", "received_bytes", "allreduce_seconds"),
    "sent_mbit_per_second",
)


def link_rates_table(analysis: Analysis) -> Table:
    """Per peer of each run whose traffic was counted: the bytes its Hivemind traffic sent and received over
    the run (``bytes_from`` run: its exact total; rounds: the sum of its rounds' counts, where a round that
    overlapped another holds both), per sample, the median and lowest link rate of its ok rounds (modelled
    Mbit/s), its shaped rate, and how many rounds got under half of it (the round_rates table lists them)."""
    table = []
    for e in analysis.experiments:
        for peer in e.peers:
            counted = [r for r in peer.rounds if r.get("sent_bytes") is not None]
            if not counted:
                continue
            rates = [r["sent_mbit_per_second"] for r in _counted(peer.rounds)]
            shaped = shaped_mbit(e, peer.name)
            samples = total(peer.steps, "samples")
            whole = run_traffic(peer)
            sent = whole["sent_bytes"] if whole else total(counted, "sent_bytes")
            received = whole["received_bytes"] if whole else total(counted, "received_bytes")
            table.append(
                {
                    "experiment_id": e.experiment_id,
                    "setting": e.label(),
                    "peer": peer.name,
                    "rounds_counted": len(counted),
                    "bytes_from": "run" if whole else "rounds",
                    "sent_mb": sent / 1e6,
                    "received_mb": received / 1e6,
                    "sent_bytes_per_sample": sent / samples if samples else None,
                    "median_mbit": statistics.median(rates) if rates else None,
                    "lowest_mbit": min(rates) if rates else None,
                    "shaped_mbit": shaped,
                    "rounds_under_half": None if shaped is None else sum(rate < shaped / 2 for rate in rates),
                }
            )
    return make_table("link_rates", "Link rate per peer (Hivemind's all-reduces, modelled Mbit/s)", table)


def cross_traffic_table(analysis: Analysis) -> Table:
    """Per applied cross-traffic window: its planned and achieved rate (iperf3's, modelled Mbit/s) and the
    link rate of the ok rounds of its two hosts that ended inside it against those outside it (median,
    modelled Mbit/s): what sharing the link cost Hivemind's all-reduces."""
    table = []
    for e in analysis.experiments:
        for window in _cross_windows(e):
            hosts = (window["host"], window["target"])
            rounds = [r for peer in e.peers if peer.name in hosts for r in _counted(peer.rounds)]
            inside = [r["sent_mbit_per_second"] for r in rounds if _inside(r, window)]
            outside = [r["sent_mbit_per_second"] for r in rounds if not _inside(r, window)]
            table.append(
                {
                    "experiment_id": e.experiment_id,
                    "setting": e.label(),
                    "window": window["spec"],
                    "rate_mbit": window.get("rate_mbit"),
                    "achieved_mbit": window.get("achieved_mbit"),
                    "rounds_inside": len(inside),
                    "median_mbit_inside": statistics.median(inside) if inside else None,
                    "rounds_outside": len(outside),
                    "median_mbit_outside": statistics.median(outside) if outside else None,
                }
            )
    return make_table(
        "cross_traffic", "Cross traffic: its hosts' link rate per round inside and outside", table
    )


def cross_traffic_effect_table(analysis: Analysis) -> Table:
    """Per setting and window, over its repeats: each run's median link rate of the window's two hosts' ok
    rounds inside the window against outside it (each run its own control), the geometric mean of those
    ratios with its 95 % interval, and the verdict (does the window lower the achieved rate?)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in analysis.tables["cross_traffic"].rows:
        groups[row["setting"], row["window"]].append(row)
    table = []
    for (setting, window), rows in groups.items():
        ratios = [
            row["median_mbit_inside"] / row["median_mbit_outside"]
            for row in rows
            if row["median_mbit_inside"] and row["median_mbit_outside"]
        ]
        interval = paired_ratio_interval(ratios)
        table.append(
            {
                "setting": setting,
                "window": window,
                "runs": len(rows),
                "runs_compared": len(ratios),
                "ratios": " ".join(f"{ratio:.3f}" for ratio in ratios),
                "ratio": math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else None,
                "ratio_ci_low": interval[0] if interval else None,
                "ratio_ci_high": interval[1] if interval else None,
                "verdict": verdict(interval, ("higher", "lower")) if ratios else "no rounds to compare",
            }
        )
    title = "Cross traffic: link rate inside the window against outside it, per setting over its repeats"
    return make_table("cross_traffic_effect", title, table)


def cross_traffic_lines(table: Table, effect: Table) -> list[str]:
    """report.md's lines on the cross-traffic windows (none: nothing)."""
    if not table.rows:
        return []
    lines = ["### Cross traffic", ""]
    for row in table.rows:
        inside, outside = row["median_mbit_inside"], row["median_mbit_outside"]
        achieved = row["achieved_mbit"]
        counts = f"{row['rounds_inside']} rounds inside, {row['rounds_outside']} outside"
        compared = (
            f"its hosts' rounds: median {inside:.1f} Mbit/s inside against {outside:.1f} outside ({counts})"
            if inside is not None and outside is not None
            else f"too few counted rounds to compare ({counts})"
        )
        flow = (
            f"the flow achieved {achieved:.1f} Mbit/s"
            if achieved is not None
            else "the flow's rate is unknown"
        )
        lines.append(f"- {row['experiment_id']} {row['window']}: {flow}; {compared}")
    for row in effect.rows:
        ratio = "" if row["ratio"] is None else f": {row['ratio']:.2f}x"
        interval = (
            f" (95 % interval {row['ratio_ci_low']:.2f}-{row['ratio_ci_high']:.2f})"
            if row["ratio_ci_low"] is not None
            else ""
        )
        lines.append(
            f"- `{row['setting']}`, {row['window']}, its hosts' link rate inside against outside over "
            f"{row['runs_compared']} of {row['runs']} runs{ratio}{interval}, {row['verdict']}"
        )
    return [
        *lines,
        "",
        f"Table `cross_traffic.csv`:\n\n{table.markdown()}\n",
        f"Table `cross_traffic_effect.csv`:\n\n{effect.markdown()}\n",
    ]


def link_rate_lines(table: Table) -> list[str]:
    """report.md's lines on the link rates: one per peer that had rounds under half its shaped rate, then the
    table (none: where the counts come from)."""
    if not table.rows:
        return [
            "Link rates per round: no run's Hivemind traffic was counted (role cluster_firewall's counting "
            "chains; docs/network.md).",
            "",
        ]
    lines = ["### Link rate per peer", ""]
    for row in table.rows:
        if row["rounds_under_half"]:
            lines.append(
                f"- {row['experiment_id']} {row['peer']}: {row['rounds_under_half']} of its ok rounds got "
                f"under half its shaped {row['shaped_mbit']:g} Mbit/s (median {row['median_mbit']:.1f}; "
                "`round_rates.csv` lists each round)"
            )
    return [*lines, "", f"Table `link_rates.csv`:\n\n{table.markdown()}\n"]
