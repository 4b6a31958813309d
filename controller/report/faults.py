"""What each planned fault cost (experiment.json ``faults``, written by playbooks/faults.yml; docs/faults.md).

Per applied fault, from the raw rounds.csv / steps.csv:

- **window**: from the fault's application to its heal (a kill, or a slow link without a duration: the
  application only);
- **recovered after**: seconds from the end of the window to the next successful averaging round of the
  faulted peer (for a kill: of any surviving peer); empty when none came (``rejoined`` false);
- **rounds failed**: failed rounds of every peer from the application until the faulted peer is back in step
  (its first ok round at the collaboration's epoch: the others' latest successful round by then; for a kill,
  the survivors' recovery), or the run's end: a peer that rejoins behind still loses a round to the download;
- **samples lost**: samples the faulted peer computed in epochs it never averaged (no ok round of its own
  for that epoch) that ended after the fault began: for a kill the work since its last round, for a pause or
  partition the samples Hivemind threw away when the peer came back behind.

A restart (a kill, and the trainer started again after the downtime; churn is made of them) is a window from
the kill to the restart, after which the restarted peer must come back: its recovery is its own first ok
round after the restart, and the rounds failed are everybody's until it is back in step. It adds, from the
restarted trainer's rejoins.jsonl and steps.csv:

- **first step after**: seconds from the restart to the new incarnation's first step (process start, DHT
  join, state download);
- **state download**: the download's seconds and the bytes the host received meanwhile.
"""

from __future__ import annotations

from typing import Any

from controller.report.data import Experiment
from controller.report.metrics import Table

APPLIED = ("applied", "healed")
COLUMNS = (
    "experiment_id",
    "fault",
    "status",
    "planned_seconds",
    "applied_seconds",
    "healed_seconds",
    "rounds_failed",
    "failed_by_cause",
    "recovered_after_seconds",
    "rejoined",
    "samples_lost",
    "first_step_after_seconds",
    "state_download_seconds",
    "state_download_bytes",
    "detail",
)


def fault_windows(e: Experiment) -> list[dict[str, Any]]:
    """The experiment's applied faults: spec, kind, host, and start/end in seconds since the first step."""
    windows = []
    for fault in e.faults:
        if fault.get("status") not in APPLIED or fault.get("applied_seconds") is None:
            continue
        start = float(fault["applied_seconds"])
        end = fault.get("healed_seconds")
        windows.append({**fault, "start": start, "end": float(end) if end is not None else None})
    return windows


def _ok_rounds_after(rounds: list[dict[str, Any]], moment: float) -> list[float]:
    return sorted(r["timestamp"] for r in rounds if r["outcome"] == "ok" and r["timestamp"] > moment)


def fault_row(e: Experiment, fault: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "experiment_id": e.experiment_id,
        "fault": fault.get("spec"),
        "status": fault.get("status"),
        "planned_seconds": fault.get("at_seconds"),
        "applied_seconds": fault.get("applied_seconds"),
        "healed_seconds": fault.get("healed_seconds"),
        "detail": fault.get("detail", ""),
    }
    applied = fault.get("applied_at")
    if fault.get("status") not in APPLIED or applied is None:
        return row
    applied = float(applied)
    window_end = float(fault.get("healed_at") or applied)
    peers = {peer.name: peer for peer in e.peers}
    faulted = peers.get(fault["host"])
    if fault["kind"] == "kill":
        witnesses = [peer for name, peer in peers.items() if name != fault["host"]]
    else:
        witnesses = [faulted] if faulted is not None else []
    recoveries = [t for peer in witnesses for t in _ok_rounds_after(peer.rounds, window_end)[:1]]
    recovered = min(recoveries) if recoveries else None
    if fault["kind"] == "kill":
        until = recovered if recovered is not None else float("inf")
    else:
        others = [r for peer in e.peers if peer is not faulted for r in peer.rounds if r["outcome"] == "ok"]
        until = _back_in_step(faulted.rounds if faulted else [], others, window_end)
    failed = [
        r
        for peer in e.peers
        for r in peer.rounds
        if r["outcome"] != "ok" and applied <= r["timestamp"] <= until
    ]
    causes: dict[str, int] = {}
    for r in failed:
        causes[r.get("cause") or "other"] = causes.get(r.get("cause") or "other", 0) + 1
    if fault["kind"] == "restart" and faulted is not None:
        row.update(_rejoin_costs(e, fault, faulted, window_end))
    row.update(
        rounds_failed=len(failed),
        failed_by_cause=" ".join(f"{cause}:{n}" for cause, n in sorted(causes.items())),
        recovered_after_seconds=round(recovered - window_end, 2) if recovered is not None else None,
        rejoined=recovered is not None,
        samples_lost=_samples_lost(faulted, applied, killed=fault["kind"] in ("kill", "restart"))
        if faulted is not None
        else None,
    )
    return row


def _rejoin_costs(e: Experiment, fault: dict[str, Any], peer: Any, restarted: float) -> dict[str, Any]:
    """The restarted trainer's first step and state download (a host's n-th restart is its n-th rejoin)."""
    restarts = sorted(
        (f for f in fault_windows(e) if f["kind"] == "restart" and f["host"] == fault["host"]),
        key=lambda f: f["start"],
    )
    index = next((i for i, f in enumerate(restarts) if f.get("spec") == fault.get("spec")), None)
    rejoin = peer.rejoins[index] if index is not None and index < len(peer.rejoins) else {}
    after = [s["timestamp"] for s in peer.steps if (s.get("timestamp") or 0) > restarted]
    first_step = min(after, default=None)
    return {
        "first_step_after_seconds": round(first_step - restarted, 2) if first_step is not None else None,
        "state_download_seconds": rejoin.get("state_download_seconds"),
        "state_download_bytes": rejoin.get("state_download_bytes"),
    }


def _back_in_step(own: list[dict[str, Any]], others: list[dict[str, Any]], after: float) -> float:
    """Unix time of the peer's first ok round after ``after`` at the others' epoch (inf: none came)."""
    for r in sorted(own, key=lambda r: r["timestamp"]):
        if r["outcome"] != "ok" or r["timestamp"] <= after or r.get("epoch") is None:
            continue
        earlier = [o for o in others if o["timestamp"] <= r["timestamp"] and o.get("epoch") is not None]
        ahead = [int(o["epoch"]) for o in earlier]
        if not ahead or int(r["epoch"]) >= max(ahead):
            return float(r["timestamp"])
    return float("inf")


def _samples_lost(peer: Any, applied: float, *, killed: bool = False) -> int:
    """Samples in epochs the peer never averaged, computed after the fault began; for a kill (or restart)
    also those of the epoch it was killed in, which died with it."""
    averaged = {int(r["epoch"]) for r in peer.rounds if r["outcome"] == "ok" and r.get("epoch") is not None}
    steps = [s for s in peer.steps if s.get("timestamp") is not None and s.get("hivemind_epoch") is not None]
    before = [s for s in steps if s["timestamp"] < applied]
    killed_in = int(before[-1]["hivemind_epoch"]) if killed and before else None
    lost = 0
    for step in steps:
        epoch = int(step["hivemind_epoch"])
        if epoch in averaged:
            continue
        if step["timestamp"] >= applied or (step["timestamp"] < applied and epoch == killed_in):
            lost += int(step.get("samples") or 0)
    return lost


def faults_table(experiments: list[Experiment]) -> Table:
    rows = [fault_row(e, fault) for e in experiments for fault in e.faults]
    return Table("faults", "Faults on purpose: what each cost (docs/faults.md)", COLUMNS, rows)
