"""Time to accuracy: the validation accuracy every baseline repeat reaches is the target, and each
run's time is the moment its last peer got there; from runs with known evals.csv rows."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.data import Experiment, PeerRun
from controller.report.effects import effect_verdicts
from controller.report.intervals import noise_floor_lines, verdict_lines

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
    # geometric means: sqrt(8 * 6) / sqrt(4 * 3) = 2; 2 vs 2 runs this far apart do not decide it
    assert compared["time_to_accuracy_speedup"] == pytest.approx(2.0)
    assert compared["time_to_accuracy_ci_low"] < 1 < compared["time_to_accuracy_ci_high"]
    assert compared["time_to_accuracy_verdict"] == "within the noise"
    assert compared["time_to_accuracy_runs_needed"] >= 3
    # the run that never got there is counted, not dropped
    assert never["time_to_accuracy_speedup"] is None and never["time_to_accuracy_reached"] == "0/1 vs 2/2"
    assert never["time_to_accuracy_verdict"] == "undecided: 0 of 1 vs 2 of 2 reached"
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


def _baseline(name: str, learning_rate: float, step_seconds: float) -> Experiment:
    settings = {**SETTINGS, "strategy": "baseline", "peers": 1, "learning_rate": learning_rate}
    return Experiment(
        name, Path(name), settings, True, [PeerRun("baseline", _steps(10, step_seconds), [], True)]
    )


def test_effects_and_the_diagnosis_say_which_differences_are_beyond_the_noise():
    """Three repeats at LR 0.01, three twice as fast at LR 0.1: a level beyond the noise; the Hivemind runs of
    the first test against their baselines, in the diagnosis's words."""
    experiments = [_baseline(f"slow-{i}", 0.01, 1.0 + 0.01 * i) for i in range(3)]
    experiments += [_baseline(f"fast-{i}", 0.1, 0.5 + 0.01 * i) for i in range(3)]
    analysis = analyse(experiments, target_loss=None, bandwidth=None)
    (row,) = [
        r
        for r in analysis.tables["effects"].rows
        if r["factor"] == "learning_rate" and r["level"] == 0.1 and r["metric"] == "samples_per_second"
    ]
    assert row["reference_level"] == 0.01 and row["ratio"] == pytest.approx(2, rel=0.05)
    assert row["ratio_ci_low"] > 1 and row["verdict"] == "higher beyond the noise"
    assert row["ci_low"] < row["median"] < row["ci_high"]
    sentences = effect_verdicts(analysis.tables["effects"])
    assert any(
        "learning_rate = 0.1 against 0.01 (`baseline bs32 lr0.01`): samples_per_second 1.98x" in line
        for line in sentences
    ), sentences
    diagnosis = {r["experiment_id"]: r for r in _analysis().tables["diagnosis"].rows}
    assert diagnosis["base-r1"]["against_baselines"] is None
    words = diagnosis["hm-r1"]["against_baselines"]
    assert "time to accuracy 2.00x (95 % interval" in words and "within the noise" in words, words
    assert words.startswith("samples/s 2.00x"), words  # two peers at a baseline's step time each
    never = diagnosis["never"]["against_baselines"]
    assert never.startswith("samples/s 2.00x, needs 2 runs a side; "), never
    assert never.endswith("; time to accuracy undecided: 0 of 1 vs 2 of 2 reached"), never


def test_the_noise_floor_comes_from_repeated_solo_runs_and_marks_the_results_within_it():
    """Three solo runs whose samples/s differ by a few % are the floor (how far apart two identical
    runs land); a 2-peer run 1.05x its baselines is within it, whatever its interval says; one solo run gives
    no floor, and the report says what it needs."""

    def run(name: str, strategy: str, *step_seconds: float) -> Experiment:
        peers = [PeerRun(f"peer-{i + 1:02d}", _steps(10, s), [], True) for i, s in enumerate(step_seconds)]
        settings = {**SETTINGS, "strategy": strategy, "peers": len(peers)}
        return Experiment(name, Path(name), settings, True, peers)

    solo = [run(f"noise-floor-solo-r{i}", "solo", s, s * 1.1) for i, s in enumerate((1.0, 1.04, 0.97))]
    experiments = [
        *solo,
        *(run(f"base-{i}", "baseline", 1.0 + 0.001 * i) for i in range(3)),
        # two peers at 2 x 1.05 / 2 of a baseline's rate each: 1.05x
        *(run(f"hm-{i}", "hivemind", 2 / 1.05 + 0.001 * i, 2 / 1.05 + 0.001 * i) for i in range(3)),
    ]
    analysis = analyse(experiments, target_loss=None, bandwidth=None)
    (floor,) = analysis.tables["noise_floor"].rows
    rates = [r["samples_per_second"] for r in analysis.tables["experiments"].rows if r["experiment_id"] in
             {e.experiment_id for e in solo}]  # fmt: skip
    expected = math.exp(1.959964 * math.sqrt(2) * statistics.stdev(map(math.log, rates))) - 1
    assert floor["runs"] == 3 and floor["floor"] == pytest.approx(expected, rel=1e-4)
    assert floor["floor_ci_low"] < floor["floor"] < floor["floor_ci_high"]
    assert floor["peer_spread"] == pytest.approx(0.1)  # one run's peers: shown, not the floor
    rows = {row["setting"]: row for row in analysis.tables["comparisons"].rows}
    hivemind = rows["2p tbsNone"]
    assert hivemind["throughput_speedup"] == pytest.approx(1.05, rel=0.01)
    assert hivemind["throughput_verdict"] == "faster beyond the noise"  # the interval alone excludes 1 ...
    assert floor["floor"] > 0.05 and hivemind["within_noise_floor"] is True  # ... but the floor is wider
    lines = noise_floor_lines(analysis.tables["noise_floor"])
    assert lines[0].startswith(f"Noise floor: {floor['floor']:.0%} (95 % interval "), lines
    verdicts = verdict_lines(analysis.tables["comparisons"], analysis.tables["repeats"])
    assert any("samples/s: 1.05x" in v and v.endswith("within the testbed's noise floor.") for v in verdicts)
    one = analyse(experiments[2:], target_loss=None, bandwidth=None)
    (line,) = noise_floor_lines(one.tables["noise_floor"])
    assert line.startswith(
        "Noise floor: not measured: it needs 2 or more `solo` runs of one setting (one solo"
    )
    assert "10% between peers" in line and "11-24" not in line
    assert {row["within_noise_floor"] for row in one.tables["comparisons"].rows} == {None}
