"""What each run cost, from the prices in the inventory (docs/cost.md): ``price_per_vcpu_hour`` and
``price_per_gb_egress``, per host or for every host, recorded in experiment.json's ``hosts`` where set. A run
whose hosts have no price has no row: without prices the report shows no cost.

A run's cost is its hosts' vCPUs for its training time (the barrier's release to the last step, in modelled
time for a dilated run: what the VMs it models would have been billed for it) plus the bytes its peers sent
(their interfaces' counters, summary.json ``network``; a GB is 1e9 bytes). The set-up before the training
and the hosts a run shares with every other (the monitor, the storage) are not counted. The cost to a target
counts the vCPUs up to the moment the target was reached and the bytes in proportion to that time (the
counters give the whole run's bytes, not their timing)."""

from __future__ import annotations

from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import Analysis, Table, make_table

PRICES = ("price_per_vcpu_hour", "price_per_gb_egress")
GB = 1e9

COLUMNS = (
    *("experiment_id", "setting", "peers", "priced_hosts", "training_seconds", "vcpu_hours", "compute_cost"),
    *("egress_gb", "egress_cost", "cost", "cost_per_1000_samples", "cost_to_target", "cost_to_accuracy"),
)


def _sent_bytes(e: Experiment) -> dict[str, float | None]:
    """Bytes each host sent while training (None: its trainer wrote no count). A baseline's one peer is its
    one host."""
    sent = {}
    for peer in e.peers:
        host = next(iter(e.hosts)) if e.is_baseline and len(e.hosts) == 1 else peer.name
        network = peer.summary.get("network") or {}
        sent[host] = network.get("sent_bytes")
    return sent


def run_cost(e: Experiment, seconds: float | None) -> dict[str, Any] | None:
    """The cost of ``seconds`` of the run's training on its priced hosts; None when no host has a price.

    >>> from pathlib import Path
    >>> from controller.report.data import PeerRun
    >>> hosts = {"peer-01": {"vcpus": 4, "price_per_vcpu_hour": 0.05, "price_per_gb_egress": 0.09},
    ...          "peer-02": {"vcpus": 4, "price_per_vcpu_hour": 0.05}}
    >>> peers = [PeerRun(name, [], [], True, {"network": {"sent_bytes": 2e9}}) for name in hosts]
    >>> e = Experiment("x", Path("."), {"peers": 2}, True, peers, hosts=hosts)
    >>> cost = run_cost(e, 1800)
    >>> cost["vcpu_hours"], round(cost["compute_cost"], 3), cost["egress_gb"], round(cost["egress_cost"], 3)
    (4.0, 0.2, 2.0, 0.18)
    >>> round(cost["cost"], 3), cost["priced_hosts"]
    (0.38, '2/2')
    >>> run_cost(Experiment("y", Path("."), {}, True, peers, hosts={"peer-01": {"vcpus": 4}}), 1800) is None
    True
    """
    priced = {host: plan for host, plan in e.hosts.items() if any(plan.get(p) is not None for p in PRICES)}
    if not priced or seconds is None:
        return None
    sent = _sent_bytes(e)
    vcpu_hours = compute = egress_bytes = egress = 0.0
    for host, plan in priced.items():
        hours = float(plan.get("vcpus") or 0) * seconds / 3600
        if plan.get("price_per_vcpu_hour") is not None:
            vcpu_hours += hours
            compute += hours * plan["price_per_vcpu_hour"]
        if plan.get("price_per_gb_egress") is not None and sent.get(host):
            egress_bytes += sent[host]
            egress += sent[host] / GB * plan["price_per_gb_egress"]
    return {
        "priced_hosts": f"{len(priced)}/{len(e.hosts)}",
        "training_seconds": seconds,
        "vcpu_hours": vcpu_hours,
        "compute_cost": compute,
        "egress_gb": egress_bytes / GB,
        "egress_cost": egress,
        "cost": compute + egress,
    }


def _up_to(cost: dict[str, Any], seconds: float | None) -> float | None:
    """The cost of the run's first ``seconds``: its vCPUs for that long, its bytes in proportion."""
    if seconds is None or not cost["training_seconds"]:
        return None
    return (cost["compute_cost"] + cost["egress_cost"]) * seconds / cost["training_seconds"]


def cost_table(analysis: Analysis, rows: dict[str, dict[str, Any]]) -> Table:
    """Per priced run: vCPU-hours and egress, their cost, the cost per 1000 samples and to the target loss
    and accuracy (the report's targets, ``time_to_target_seconds`` and ``time_to_accuracy_seconds``)."""
    table = []
    for e in analysis.experiments:
        row = rows[e.experiment_id]
        cost = run_cost(e, row["wall_seconds"])
        if cost is None:
            continue
        samples = row["samples"]
        table.append(
            {
                "experiment_id": e.experiment_id,
                "setting": e.label(),
                "peers": e.peer_count,
                **cost,
                "cost_per_1000_samples": cost["cost"] / samples * 1000 if samples else None,
                "cost_to_target": _up_to(cost, row["time_to_target_seconds"]),
                "cost_to_accuracy": _up_to(cost, row["time_to_accuracy_seconds"]),
            }
        )
    return make_table("cost", "Cost (the inventory's prices, docs/cost.md)", table, COLUMNS)
