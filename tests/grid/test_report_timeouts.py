"""The report's timeouts table and recommendation (controller/report/timeouts.py) on hand-made
experiments with known answers, and a restart's rejoin costs in the faults table."""

from __future__ import annotations

from pathlib import Path

from controller.report.data import Experiment, PeerRun
from controller.report.faults import fault_row
from controller.report.metrics import loss_curve
from controller.report.timeouts import recommendation_lines, timeouts_table

T0 = 1_000.0


def _run(
    name: str, matchmaking: float, timeout: float, seconds_per_step: float, failed: int, slope: float = -0.1
) -> Experiment:
    """A 4-peer Hivemind run whose loss moves from 2.0 by ``slope`` a step (one curve, at its own pace)."""
    steps = [
        {"step": i, "timestamp": T0 + i * seconds_per_step, "wall_seconds": i * seconds_per_step,
         "loss": 2.0 + slope * i, "samples": 32, "hivemind_epoch": i // 4}
        for i in range(1, 16)
    ]  # fmt: skip
    rounds = [{"timestamp": T0 + 1, "epoch": 0, "outcome": "timeout", "cause": "no_group"}] * failed
    settings = {"strategy": "hivemind", "peers": 4, "model": "smallcnn", "batch_size": 32,
                "matchmaking_time": matchmaking, "averaging_timeout": timeout, "churn": "x"}  # fmt: skip
    return Experiment(name, Path(name), settings, True, peers=[PeerRun("peer-01", steps, rounds, True)])


def _table(experiments: list[Experiment]):
    curves = {e.experiment_id: loss_curve(e) for e in experiments}
    rows = {
        e.experiment_id: {"samples_per_second": 100.0, "rounds_failed": len(e.peers[0].rounds)}
        for e in experiments
    }
    return timeouts_table(experiments, curves, rows)


def test_the_fastest_pair_is_recommended_and_ties_go_to_the_fewest_failed_rounds():
    # mm1/at10 and mm5/at60 are as fast (their repeats overlap), but mm1/at10 failed rounds; mm2/at10: slower
    runs = [
        _run("a1", 1, 10, 1.0, 3), _run("a2", 1, 10, 1.2, 3),
        _run("b1", 5, 60, 1.1, 0), _run("b2", 5, 60, 1.3, 0),
        _run("c1", 2, 10, 3.0, 0), _run("c2", 2, 10, 3.1, 0),
    ]  # fmt: skip
    table = _table(runs)
    rows = {(r["matchmaking_time"], r["averaging_timeout"]): r for r in table.rows}
    assert len(rows) == 3 and all(r["repeats"] == 2 for r in rows.values())
    assert [pair for pair, r in rows.items() if r["recommended"]] == [(5.0, 60.0)], table.rows
    assert rows[(5.0, 60.0)]["why"].startswith("tied with the fastest"), rows[(5.0, 60.0)]
    assert rows[(1.0, 10.0)]["time_to_target_mean"] < rows[(2.0, 10.0)]["time_to_target_mean"]
    (line,) = recommendation_lines(table)
    assert "matchmaking_time=5 s, averaging_timeout=60 s" in line and "3 settings tried" in line


def test_a_group_whose_runs_did_not_learn_gets_no_recommendation():
    # one run's loss rose: the group's target (its highest final loss) lies above where the runs started
    table = _table([_run("a1", 1, 10, 1.0, 0), _run("b1", 5, 60, 1.0, 0, slope=0.01)])
    assert [r["recommended"] for r in table.rows] == [False, False], table.rows
    assert all(r["why"].startswith("no recommendation") for r in table.rows), table.rows
    (line,) = recommendation_lines(table)
    assert "did not learn" in line, line


def test_one_setting_alone_is_not_a_comparison():
    assert _table([_run("a1", 1, 10, 1.0, 0), _run("a2", 1, 10, 1.1, 0)]).rows == []


def test_a_restart_row_gives_the_first_step_and_the_state_download():
    steps = [{"timestamp": T0 + t, "hivemind_epoch": t // 5, "samples": 16} for t in (*range(0, 8), 20, 21)]
    rounds = [
        {"timestamp": T0 + 5, "epoch": 0, "outcome": "ok"},
        {"timestamp": T0 + 25, "epoch": 4, "outcome": "ok"},
    ]
    rejoin = {"incarnation": 2, "state_download_seconds": 0.4, "state_download_bytes": 350_000}
    peer = PeerRun("peer-b", steps, rounds, True, rejoins=[rejoin])
    restart = {"spec": "restart:peer-b@8s+6s", "kind": "restart", "host": "peer-b", "status": "healed",
               "applied_seconds": 8.0, "healed_seconds": 14.0,
               "applied_at": T0 + 8, "healed_at": T0 + 14}  # fmt: skip
    e = Experiment("x", Path("."), {"strategy": "hivemind"}, True, peers=[peer], faults=[restart])
    row = fault_row(e, restart)
    assert row["first_step_after_seconds"] == 6.0 and row["recovered_after_seconds"] == 11.0, row
    assert (row["state_download_seconds"], row["state_download_bytes"]) == (0.4, 350_000)
    # the killed incarnation's epoch-1 steps (5-7 s) were never averaged: lost with it
    assert row["samples_lost"] == 3 * 16, row
