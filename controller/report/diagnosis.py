"""What bounds each run, with the evidence and the knob that would move it, and a granularity model that
predicts the collaborative speedup (definitions in controller/report/metrics.py).

Bounds: ``data`` (waiting for batches), ``compute`` (forward and backward), ``communication`` (the all-reduce
itself), ``coordination`` (a step waiting for averaging beyond its all-reduce: matchmaking, peers that are
not there yet, failed rounds), ``straggler`` (one peer far slower than the others, who wait for it) and
``host`` (the CPU a peer was promised did not reach it). The first four are the largest share of the summed
step time; ``straggler`` and ``host`` override them when their evidence holds, since they are what to fix
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controller.report.intervals import against_baselines
from controller.report.metrics import Analysis, Table, bandwidth_bound, latency_seconds, median, total

if TYPE_CHECKING:
    from controller.report.data import Experiment

#: a straggler: the last to arrive at this share of the epoch ends while every other peer spends this share of
#: its wall time waiting for it, or a peer below this fraction of the others' median samples/s
STRAGGLER_LAST_SHARE = 0.75
STRAGGLER_WAIT_SHARE = 0.2
STRAGGLER_RATIO = 0.7
#: a peer that used less than this fraction of its CPU limit, or equal peers further apart, is host-bound
CPU_RECEIVED_RATIO = 0.8
KNOBS = {
    "data": "more data workers (data_workers), a local copy of the dataset, preprocessing once",
    "compute": "more vCPUs per peer, or more peers",
    "communication": "a larger target batch size (fewer rounds per sample), more bandwidth, local updates",
    "coordination": "a shorter matchmaking_time or a larger target batch size; see the failed rounds",
    "straggler": "more vCPUs or bandwidth for the slow peer, or leave it out",
    "host": "fix the CPU placement (docs/fair-cpu.md): the peers did not get the CPU they were promised",
}
#: added to a compute-bound Hivemind run's knob when it averaged gradients (no local updates)
HIVEMIND_COMPUTE_KNOB = (
    "; a larger average_state_every (Hivemind's background parameter rounds slow the compute, "
    "docs/study-scale.md)"
)

#: added to a communication-bound Hivemind run's knob while it sent uncompressed (compression)
HIVEMIND_COMMUNICATION_KNOB = "; compression (compression=fp16 sends half the bytes, uint8 about a quarter)"


def _knob(bound: str, e: Experiment) -> str:
    """What to change, for a run bound by ``bound``; Hivemind runs get their own knobs too."""
    knob = KNOBS[bound]
    if bound == "compute" and _averages_gradients(e):
        knob += HIVEMIND_COMPUTE_KNOB
    if (
        bound == "communication"
        and e.strategy == "hivemind"
        and e.settings.get("compression") in (None, "none")
    ):
        knob += HIVEMIND_COMMUNICATION_KNOB
    return knob


def split_averaging(e: Experiment) -> tuple[float, float]:
    """Seconds the steps of all peers waited in all-reduce and in coordination (the rest of the wait).

    A round's all-reduce counts as far as the step waited for it; what the steps waited beyond the
    all-reduces (matchmaking, absent peers, failed rounds) is coordination. For DDP/ZeRO all of it is
    all-reduce.

    >>> from controller.report.data import Experiment, PeerRun
    >>> steps = [{"averaging_seconds": 3.0}]
    >>> rounds = [{"outcome": "ok", "allreduce_seconds": 1.0, "blocking_seconds": 2.5}]
    >>> run = Experiment("x", None, {"strategy": "hivemind"}, True, [PeerRun("p", steps, rounds, True)])
    >>> split_averaging(run)
    (1.0, 2.0)
    """
    waited = sum(total(peer.steps, "averaging_seconds") for peer in e.peers)
    allreduce = 0.0
    for peer in e.peers:
        for row in peer.rounds:
            seconds, blocking = row.get("allreduce_seconds"), row.get("blocking_seconds")
            if row.get("outcome") == "ok" and seconds is not None:
                allreduce += min(seconds, blocking) if blocking is not None else seconds
    allreduce = min(allreduce, waited)
    return allreduce, waited - allreduce


def diagnose(e: Experiment, breakdown: dict[str, Any], peers: list[dict[str, Any]]) -> dict[str, Any]:
    """The bound of one run, its evidence and the knob (one row of the diagnosis table)."""
    step_total = sum(total(peer.steps, "step_seconds") for peer in e.peers)
    allreduce, coordination = split_averaging(e)
    shares = {
        "data": breakdown.get("data_share") or 0.0,
        "compute": breakdown.get("compute_share") or 0.0,
        "communication": allreduce / step_total if step_total else 0.0,
        "coordination": coordination / step_total if step_total else 0.0,
    }
    bound = max(shares, key=shares.__getitem__)
    evidence = [f"{part} {share:.0%}" for part, share in sorted(shares.items(), key=lambda kv: -kv[1])]
    failed = sum(row.get("outcome") not in (None, "ok") for peer in e.peers for row in peer.rounds)
    if failed:
        evidence.append(f"{failed} failed rounds")
    straggler = _straggler(peers)
    if straggler is not None:
        bound = "straggler"
        evidence.insert(0, straggler)
    host = _host_problem(e)
    if host is not None:
        bound = "host"
        evidence.insert(0, host)
    return {
        "experiment_id": e.experiment_id,
        "setting": e.label(),
        "bound": bound,
        **{f"{part}_share": share for part, share in shares.items()},
        "evidence": "; ".join(evidence),
        "knob": _knob(bound, e),
    }


def _averages_gradients(e: Experiment) -> bool:
    return e.strategy == "hivemind" and not e.settings.get("local_updates")


def _straggler(peers: list[dict[str, Any]]) -> str | None:
    """A peer the others wait for: the last to arrive at most epoch ends while the others spend a good part
    of their time waiting for it, or one far below the others' samples/s."""
    rates = {row["peer"]: row["samples_per_second"] for row in peers if row.get("samples_per_second")}
    if len(rates) < 2:
        return None
    by_peer = {row["peer"]: row for row in peers}
    epochs = max(row.get("epochs_ended") or 0 for row in peers)
    last = max(by_peer, key=lambda name: by_peer[name].get("last_arrivals") or 0)
    if epochs >= 2 and (by_peer[last].get("last_arrivals") or 0) >= STRAGGLER_LAST_SHARE * epochs:
        waited = [
            (row.get("mean_wait_for_others_s") or 0.0) * epochs / (row["samples"] / row["samples_per_second"])
            for name, row in by_peer.items()
            if name != last and row.get("samples_per_second")
        ]
        if waited and min(waited) >= STRAGGLER_WAIT_SHARE:
            return (
                f"straggler {last}: the last to arrive at {by_peer[last]['last_arrivals']} of {epochs} epoch "
                f"ends; the others spent {min(waited):.0%} or more of their time waiting for it"
            )
    slowest = min(rates, key=rates.__getitem__)
    others = median([rate for name, rate in rates.items() if name != slowest])
    if others and rates[slowest] < STRAGGLER_RATIO * others:
        return f"straggler {slowest}: {rates[slowest]:.1f} samples/s against {others:.1f} for the others"
    return None


def _host_problem(e: Experiment) -> str | None:
    """Peers that received less CPU than their limit: under full load before the run (the CPU probe), or,
    where no probe ran, while they were not waiting for averaging over the run (a peer that waits uses less
    CPU without being starved: the limit is scaled by its share of time not waiting)."""
    steps = {peer.name: peer.steps for peer in e.peers}
    starved = []
    for name, host in e.hosts.items():
        used = (host.get("cpu_received") or {}).get("cores_used")
        limit = host.get("cpus_limit")
        loaded = (host.get("cpu_probe") or {}).get("cores_used")
        if loaded is not None and limit:
            if loaded < CPU_RECEIVED_RATIO * float(limit):
                starved.append(f"{name} received {loaded:.2f} of {float(limit):.2f} cores under full load")
            continue
        rows = steps.get(name, [])
        step_total = total(rows, "step_seconds")
        busy = 1.0 - total(rows, "averaging_seconds") / step_total if step_total else 1.0
        if used is not None and limit and used < CPU_RECEIVED_RATIO * float(limit) * busy:
            starved.append(
                f"{name} used {used:.2f} of {float(limit):.2f} cores while {busy:.0%} of its time busy"
            )
    return "; ".join(starved) or None


def diagnosis_table(analysis: Analysis) -> Table:
    breakdown = {row["experiment_id"]: row for row in analysis.tables["breakdown"].rows}
    peers: dict[str, list[dict[str, Any]]] = {}
    for row in analysis.tables["peers"].rows:
        peers.setdefault(row["experiment_id"], []).append(row)
    comparisons = {row["setting_key"]: row for row in analysis.tables["comparisons"].rows}
    rows = []
    for e in analysis.experiments:
        row = diagnose(e, breakdown[e.experiment_id], peers.get(e.experiment_id, []))
        # Whether it is faster than its baselines beyond the noise, in words
        if e.is_baseline:
            row["against_baselines"] = None
        elif e.is_noise_floor:
            row["against_baselines"] = "the grid's noise floor: a measurement of the testbed, not compared"
        else:
            row["against_baselines"] = against_baselines(comparisons.get(e.setting_key()))
        rows.append(row)
    columns = (
        *("experiment_id", "setting", "bound", "data_share", "compute_share", "communication_share"),
        *("coordination_share", "evidence", "knob", "against_baselines"),
    )
    return Table("diagnosis", "What bounds each run, the evidence, and the knob to turn", columns, rows)


# ------------------------------------------------------------------------------------------ granularity


def predict(
    *,
    peers: int,
    batch_size: int,
    target_batch_size: int,
    local_step_seconds: float,
    model_bytes: float,
    bandwidth: float,
    matchmaking_seconds: float,
    baseline_samples_per_second: float,
    latency: float = 0.0,
    average_state_every: int | None = None,
) -> dict[str, float]:
    """The granularity model of one Hivemind epoch (no local updates): every peer computes its share of the
    target batch size, then one gradient all-reduce at the alpha-beta bound after matchmaking; the state
    round (parameters, every ``average_state_every`` epochs, None: never) runs beside it on the same link,
    so its bytes add to the epoch's share of the link.

    T_compute = TBS / (n · bs) · t_step, T_communicate = matchmaking + 2 α + (1 + 1/k) · 2 (n-1)/n · M / B,
    granularity G = T_compute / T_communicate, predicted throughput TBS / (T_compute + T_communicate), and the
    predicted speedup over the baseline's throughput.

    >>> p = predict(peers=2, batch_size=32, target_batch_size=640, local_step_seconds=0.5, model_bytes=40e6,
    ...             bandwidth=10e6, matchmaking_seconds=1.0, baseline_samples_per_second=64.0)
    >>> p["compute_seconds"], p["communicate_seconds"], p["granularity"], p["speedup"]
    (5.0, 5.0, 1.0, 1.0)
    >>> predict(peers=2, batch_size=32, target_batch_size=640, local_step_seconds=0.5, model_bytes=40e6,
    ...         bandwidth=10e6, matchmaking_seconds=1.0, baseline_samples_per_second=64.0,
    ...         average_state_every=1)["communicate_seconds"]
    9.0
    """
    compute = target_batch_size / (peers * batch_size) * local_step_seconds
    state_share = 1 / average_state_every if average_state_every else 0.0
    transfer = bandwidth_bound(peers, model_bytes, bandwidth)
    communicate = matchmaking_seconds + 2 * latency + (1 + state_share) * transfer
    throughput = target_batch_size / (compute + communicate)
    return {
        "compute_seconds": compute,
        "communicate_seconds": communicate,
        "matchmaking_seconds": matchmaking_seconds,
        "granularity": compute / communicate,
        "samples_per_second": throughput,
        "speedup": throughput / baseline_samples_per_second,
    }


def prediction_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Predicted against measured speedup for every Hivemind run (gradient averaging) that has baselines and a
    bandwidth (measured, or ``--bandwidth``)."""
    baselines: dict[tuple[Any, ...], list[float]] = {}
    for e in analysis.experiments:
        rate = rows[e.experiment_id]["samples_per_second"]
        if e.is_baseline and rate:
            baselines.setdefault(e.comparison_key(), []).append(rate)
    table = []
    for e in analysis.experiments:
        s = e.settings
        bandwidth = analysis.bandwidth or e.bandwidth_bytes_per_second
        m_bytes = analysis.model_bytes.get(str(s.get("model")))
        base = median(baselines.get(e.comparison_key(), []))
        if e.strategy != "hivemind" or s.get("local_updates") or not (bandwidth and m_bytes and base):
            continue
        steps = [row for peer in e.peers for row in peer.steps]
        if not steps or not s.get("target_batch_size"):
            continue
        local_step = (total(steps, "step_seconds") - total(steps, "averaging_seconds")) / len(steps)
        # the matchmaking the gradient rounds measured (rounds.csv), the configured time where none did
        measured_matchmaking = median(
            [
                float(r["matchmaking_seconds"])
                for peer in e.peers
                for r in peer.rounds
                if r.get("kind") == "gradients" and r.get("matchmaking_seconds") is not None
            ]
        )
        predicted = predict(
            peers=e.peer_count,
            batch_size=int(s["batch_size"]),
            target_batch_size=int(s["target_batch_size"]),
            local_step_seconds=local_step,
            model_bytes=m_bytes,
            bandwidth=bandwidth,
            matchmaking_seconds=(
                measured_matchmaking
                if measured_matchmaking is not None
                else float(s.get("matchmaking_time") or 0.0)
            ),
            baseline_samples_per_second=base,
            latency=latency_seconds(e),
            average_state_every=int(s.get("average_state_every") or 1),
        )
        measured = (
            rows[e.experiment_id]["samples_per_second"] / base
            if rows[e.experiment_id]["samples_per_second"]
            else None
        )
        table.append(
            {
                "experiment_id": e.experiment_id,
                "setting": e.label(),
                "local_step_s": local_step,
                "matchmaking_s": predicted["matchmaking_seconds"],
                "matchmaking_from": "rounds" if measured_matchmaking is not None else "setting",
                "compute_s": predicted["compute_seconds"],
                "communicate_s": predicted["communicate_seconds"],
                "granularity": predicted["granularity"],
                "predicted_speedup": predicted["speedup"],
                "measured_speedup": measured,
                "error": (predicted["speedup"] - measured) / measured if measured else None,
            }
        )
    columns = (
        *("experiment_id", "setting", "local_step_s", "matchmaking_s", "matchmaking_from"),
        *("compute_s", "communicate_s", "granularity"),
        *("predicted_speedup", "measured_speedup", "error"),
    )
    title = "Granularity and predicted speedup (throughput over the baselines'), against the measured one"
    return Table("prediction", title, columns, table)
