"""The report's fault costs (controller/report/faults.py) on hand-made rounds and steps with known answers."""

from __future__ import annotations

from pathlib import Path

from controller.report.data import Experiment, PeerRun
from controller.report.faults import fault_row, fault_windows

T0 = 1_000.0  # Unix time of the first step


def _round(t: float, epoch: int, outcome: str = "ok", cause: str = "") -> dict:
    return {"timestamp": T0 + t, "epoch": epoch, "outcome": outcome, "cause": cause}


def _steps(times_epochs: list[tuple[float, int]]) -> list[dict]:
    return [
        {"timestamp": T0 + t, "wall_seconds": t, "hivemind_epoch": e, "samples": 16} for t, e in times_epochs
    ]


def _experiment(peers: list[PeerRun], faults: list[dict]) -> Experiment:
    return Experiment("x", Path("."), {"strategy": "hivemind"}, True, peers=peers, faults=faults)


def test_a_partitioned_peer_that_came_back_behind():
    # peer-b is cut off 10-18 s: its epoch-2 round finds no group; after the heal it averages once more at its
    # epoch 2 (21 s) while the others are at epoch 3, is found behind (22 s), loads their state and is back in
    # step with their epoch-5 round at 25 s
    others = PeerRun("peer-a", _steps([(t, t // 5) for t in range(0, 30)]), [
        _round(5, 0), _round(10, 1), _round(15, 2), _round(20, 3), _round(25, 5)], True)  # fmt: skip
    faulted = PeerRun("peer-b", _steps([(t, min(t // 5, 2)) for t in range(0, 22)] + [(24, 5)]), [
        _round(5, 0), _round(9, 1), _round(16, 2, "timeout", "no_group"), _round(21, 2),
        _round(22, 2, "failed", "behind"), _round(25, 5)], True)  # fmt: skip
    partition = {"spec": "partition:peer-b@10s+8s", "kind": "partition", "host": "peer-b", "status": "healed",
                 "at_seconds": 10, "applied_seconds": 10.0, "healed_seconds": 18.0,
                 "applied_at": T0 + 10, "healed_at": T0 + 18}  # fmt: skip
    row = fault_row(_experiment([others, faulted], [partition]), partition)
    # it reached the others again 3 s after the heal; two rounds failed until it was back in step
    assert row["rejoined"] is True and row["recovered_after_seconds"] == 3.0, row
    assert row["rounds_failed"] == 2 and row["failed_by_cause"] == "behind:1 no_group:1", row
    # every epoch it computed in had an ok round of its own (0, 1, 2, 5): no samples counted lost
    assert row["samples_lost"] == 0, row
    assert [w["end"] for w in fault_windows(_experiment([], [partition]))] == [18.0]


def test_a_killed_peer_costs_the_samples_since_its_last_round_and_the_survivors_recover():
    survivor = PeerRun("peer-a", _steps([(t, t // 5) for t in range(0, 20)]), [
        _round(5, 0), _round(10, 1, "failed", "peer_left"), _round(13, 2), _round(18, 3)], True)  # fmt: skip
    killed = PeerRun("peer-b", _steps([(t, t // 5) for t in range(0, 9)]), [_round(5, 0)], False)
    kill = {"spec": "kill:peer-b@8s", "kind": "kill", "host": "peer-b", "status": "applied", "at_seconds": 8,
            "applied_seconds": 8.0, "applied_at": T0 + 8}  # fmt: skip
    row = fault_row(_experiment([survivor, killed], [kill]), kill)
    assert row["recovered_after_seconds"] == 5.0 and row["rejoined"] is True, row
    assert row["rounds_failed"] == 1 and row["failed_by_cause"] == "peer_left:1", row
    # its steps at 5-8 s, in epoch 1, never averaged: they died with it
    assert row["samples_lost"] == 64, row


def test_a_fault_that_never_happened_has_no_cost():
    skipped = {"spec": "pause:peer-b@99s+5s", "kind": "pause", "host": "peer-b", "status": "skipped",
               "detail": "the trainer had ended before the fault was due"}  # fmt: skip
    row = fault_row(_experiment([], [skipped]), skipped)
    assert row["status"] == "skipped" and "rounds_failed" not in row
    assert row["detail"].startswith("the trainer")
    assert fault_windows(_experiment([], [skipped])) == []
