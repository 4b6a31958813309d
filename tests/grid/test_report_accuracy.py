"""Time to accuracy (issue #26): the validation accuracy every baseline repeat reaches is the target, and each
run's time is the moment its last peer got there; from runs with known evals.csv rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.data import Experiment, PeerRun

SETTINGS = {"model": "smallcnn", "dataset": "synthetic", "batch_size": 32, "learning_rate": 0.01, "vcpus": 1}


def _steps(count: int = 10, step_seconds: float = 1.0) -> list[dict]:
    return [
        {"step": i, "wall_seconds": i * step_seconds, "step_seconds": step_seconds, "data_seconds": 0.0,
         "compute_seconds": step_seconds, "samples": 32, "loss": 2.0 - 0.1 * i, "peers": 1}
        for i in range(1, count + 1)
    ]  # fmt: skip


def _peer(name: str, *evals: tuple[float, float]) -> PeerRun:
    rows = [{"step": 0, "wall_seconds": t, "val_loss": 1.0, "val_accuracy": a} for t, a in evals]
    return PeerRun(name, _steps(), [], True, evals=rows)


def _run(name: str, strategy: str, *peers: PeerRun) -> Experiment:
    settings = {**SETTINGS, "strategy": strategy, "peers": len(peers)}
    return Experiment(name, Path(name), settings, True, list(peers))


def _analysis(**targets):
    experiments = [
        # best accuracies 0.80 and 0.84: every baseline repeat reaches 0.80, at 8 s and at 6 s
        _run("base-r1", "baseline", _peer("baseline", (4, 0.6), (8, 0.8))),
        _run("base-r2", "baseline", _peer("baseline", (3, 0.7), (6, 0.84))),
        # the run is there when its last peer is: peer-02 reaches 0.80 at 4 s
        _run("hm-r1", "hivemind", _peer("peer-01", (2, 0.81)), _peer("peer-02", (2, 0.7), (4, 0.9))),
        _run("hm-r2", "hivemind", _peer("peer-01", (3, 0.85)), _peer("peer-02", (3, 0.82))),
        _run("never", "hivemind", _peer("peer-01", (3, 0.85)), _peer("peer-02", (3, 0.5))),
    ]
    experiments[-1].settings["target_batch_size"] = 512  # another setting, compared on its own
    return analyse(experiments, target_loss=None, bandwidth=None, **targets)


def test_the_target_is_what_every_baseline_repeat_reaches_and_the_last_peer_decides():
    analysis = _analysis()
    rows = {row["experiment_id"]: row for row in analysis.tables["experiments"].rows}
    assert {row["target_accuracy"] for row in rows.values()} == {0.8}
    assert [rows[name]["time_to_accuracy_seconds"] for name in ("base-r1", "base-r2", "hm-r1", "hm-r2")] == [
        8, 6, 4, 3
    ]  # fmt: skip
    assert rows["never"]["time_to_accuracy_seconds"] is None and rows["never"]["best_accuracy"] == 0.85
    targets = {row["experiment_id"]: row for row in analysis.tables["time_to_target"].rows}
    assert targets["hm-r1"]["baseline_time_to_accuracy_s"] == 7  # the median of 8 and 6
    assert targets["hm-r1"]["accuracy_speedup"] == pytest.approx(7 / 4)
    assert targets["never"]["accuracy_speedup"] is None
    comparisons = analysis.tables["comparisons"].rows
    (compared, never) = sorted(comparisons, key=lambda row: row["repeats"], reverse=True)
    assert compared["time_to_accuracy_speedup"] == pytest.approx(7 / 3.5)
    assert compared["time_to_accuracy_ci_low"] > 1 and compared["time_to_accuracy_verdict"] == (
        "faster beyond the noise"
    )
    assert never["time_to_accuracy_verdict"] == "no data"
    effects = analysis.tables["effects"].rows
    assert any(row["metric"] == "time_to_accuracy_seconds" and row["n"] == 2 for row in effects)


def test_a_given_target_applies_to_every_run_and_runs_without_evals_have_no_time():
    analysis = _analysis(target_accuracy=0.84)
    rows = {row["experiment_id"]: row for row in analysis.tables["experiments"].rows}
    assert rows["base-r1"]["time_to_accuracy_seconds"] is None  # its best was 0.80
    assert rows["base-r2"]["time_to_accuracy_seconds"] == 6
    assert rows["hm-r1"]["time_to_accuracy_seconds"] is None  # its peer-01 reached 0.81 only
    assert rows["hm-r2"]["time_to_accuracy_seconds"] is None  # nor did its peer-02
    plain = analyse([_run("solo", "baseline", PeerRun("baseline", _steps(), [], True))], target_loss=None,
                    bandwidth=None)  # fmt: skip
    (row,) = plain.tables["experiments"].rows
    assert row["best_accuracy"] is None and row["target_accuracy"] is None
    assert row["time_to_accuracy_seconds"] is None
