"""Where a run's time went: the step breakdown (data, compute, averaging, optimizer, other), the averaging
part split by where the steps waited, the per-epoch phases, each peer's row and the memory table."""

from __future__ import annotations

from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import (
    Analysis,
    Table,
    bandwidth_bound,
    latency_seconds,
    make_table,
    median,
    total,
)
from experiment.results import percentile

BREAKDOWN_PARTS = ("data", "compute", "averaging", "optimizer_local", "other")
#: the averaging part split by where the steps waited (they sum to it): forming a group, the all-reduce
#: itself, a background round (local updates: the step waits for the round its epoch started), and the rest
#: (state averaging or download, waits no round accounts for)
AVERAGING_PARTS = ("matchmaking", "allreduce", "background_wait", "averaging_other")
EPOCH_PHASE_PARTS = ("step", "data", "compute", "optimizer", "averaging")  # steps.csv's <part>_seconds


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


def breakdown_table(experiments: list[Experiment]) -> Table:
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
    return make_table("breakdown", "Step-time breakdown (mean per step over all peers)", rows, columns)


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


def epoch_phases_table(experiments: list[Experiment]) -> Table:
    columns = ("experiment_id", "phase", "epochs", "steps", *(f"{part}_ms" for part in EPOCH_PHASE_PARTS))
    rows = [row for e in experiments for row in epoch_phase_rows(e)]
    title = "Run edges: first epoch, middle epochs, last two epochs (mean per step over all peers)"
    return make_table("epoch_phases", title, rows, columns)


def averaging_table(analysis: Analysis) -> Table:
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
    return make_table(
        "averaging", "Averaging time per round against the bandwidth lower bound", rows, columns
    )


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


def peers_table(experiments: list[Experiment]) -> Table:
    columns = (
        *("experiment_id", "peer", "vcpus", "modelled_bandwidth_mbit", "applied_bandwidth_mbit"),
        *("cores_used", "cores_under_load", "hivemind_cpu_share", "steps", "samples"),
        *("contribution", "samples_per_second", "compute_ms", "averaging_ms", "epochs_ended"),
        *("last_arrivals", "mean_wait_for_others_s"),
    )
    rows = [row for e in experiments for row in peer_rows(e)]
    title = "Peers: each one's contribution, and who waited for whom at the epoch boundaries"
    return make_table("peers", title, rows, columns)


MEMORY_KINDS = ("parameter", "gradient", "optimizer_state")


def memory_table(analysis: Analysis) -> Table:
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
    return make_table("memory", title, table)
