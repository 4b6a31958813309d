"""Results files: schema, round trip, torn rows after a crash, finished-run detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiment.results import (
    EVAL_COLUMNS,
    RESULT_FILES,
    ROUND_COLUMNS,
    STEP_COLUMNS,
    EvalRecord,
    ResultsWriter,
    RoundRecord,
    StepRecord,
    is_complete,
    percentile,
    prepare_run_dir,
    read_evals,
    read_rounds,
    read_steps,
    read_summary,
    write_multiaddrs,
)
from trainer.stats import RunStats

REPO = Path(__file__).resolve().parents[2]


def step(number: int, timestamp: float, loss: float = 1.0, wall: float | None = None) -> StepRecord:
    return StepRecord(
        step=number,
        timestamp=timestamp,
        wall_seconds=wall,
        data_seconds=0.01,
        compute_seconds=0.1,
        optimizer_seconds=0.02,
        averaging_seconds=0.0,
        step_seconds=0.13,
        samples=32,
        loss=loss,
        hivemind_epoch=0,
        peers=1,
    )


def test_columns_match_the_contract() -> None:
    assert STEP_COLUMNS[:3] == ("step", "timestamp", "wall_seconds") and len(STEP_COLUMNS) == 17
    assert "matchmaking_seconds" in ROUND_COLUMNS and ROUND_COLUMNS[0] == "round"
    assert EVAL_COLUMNS == ("step", "timestamp", "wall_seconds", "val_loss", "val_accuracy", "eval_seconds")


def test_round_trip(tmp_path) -> None:
    writer = ResultsWriter(tmp_path, flush_every=3, write_evals=True)
    writer.start_clock(1000.0)
    for number in range(1, 6):
        writer.write_step(step(number, 1000.0 + number))
    assert (
        writer.write_round(
            RoundRecord(
                timestamp=1003.5,
                epoch=1,
                kind="gradients",
                outcome="ok",
                group_size=2,
                allreduce_seconds=0.4,
                sent_bytes=3_000_000,
                received_bytes=2_900_000,
                sent_mbit_per_second=60.0,
                received_share=0.875,
            )
        )
        == 1
    )
    writer.write_round(
        RoundRecord(timestamp=1004.0, epoch=1, kind="parameters", outcome="timeout", error="no group")
    )
    writer.write_eval(EvalRecord(step=5, timestamp=1005.0, val_loss=0.5, val_accuracy=0.75))
    writer.write_summary({"complete": True, "exit_reason": "max_steps"})
    writer.close()
    steps = read_steps(tmp_path)
    assert [row["step"] for row in steps] == [1, 2, 3, 4, 5]
    assert steps[1]["wall_seconds"] == pytest.approx(2.0) and steps[1]["timestamp"] == pytest.approx(1002.0)
    rounds = read_rounds(tmp_path)
    assert rounds[0] == {
        "round": 1,
        "timestamp": 1003.5,
        "wall_seconds": 3.5,
        "epoch": 1,
        "kind": "gradients",
        "outcome": "ok",
        "group_size": 2,
        "matchmaking_seconds": None,
        "allreduce_seconds": 0.4,
        "blocking_seconds": None,
        "error": None,
        "cause": None,
        "received_share": 0.875,
        "sent_bytes": 3_000_000,
        "received_bytes": 2_900_000,
        "sent_mbit_per_second": 60.0,
    }
    assert rounds[1]["round"] == 2 and rounds[1]["outcome"] == "timeout" and rounds[1]["error"] == "no group"
    assert rounds[1]["cause"] == "no_group"  # no all-reduce began: matchmaking found nobody
    assert read_evals(tmp_path)[0]["val_accuracy"] == 0.75
    assert is_complete(tmp_path) and read_summary(tmp_path)["exit_reason"] == "max_steps"


def test_flushes_every_few_steps_and_drops_a_torn_row(tmp_path) -> None:
    writer = ResultsWriter(tmp_path, flush_every=2)
    writer.start_clock(0.0)
    for number in range(1, 6):
        writer.write_step(step(number, float(number)))
    # without close(): what another process (or a crash) sees now
    assert [row["step"] for row in read_steps(tmp_path)] == [1, 2, 3, 4]
    with open(tmp_path / "steps.csv", "a") as handle:
        handle.write("6,6.0,6.0,0.01,0.1")  # a row cut short by SIGKILL
    assert [row["step"] for row in read_steps(tmp_path)] == [1, 2, 3, 4]


def test_the_barrier_release_is_written_before_any_step(tmp_path) -> None:
    """started.json (what a fault agent times its faults from) is there as soon as the clock starts, and a
    new run in the same directory removes an earlier run's."""
    writer = ResultsWriter(tmp_path)
    writer.start_clock(1_700_000_123.5)
    assert json.loads((tmp_path / "started.json").read_text()) == {"barrier_released_at": 1_700_000_123.5}
    assert read_steps(tmp_path) == []
    writer.close()
    prepare_run_dir(tmp_path, overwrite=False)
    assert not (tmp_path / "started.json").exists()


def test_the_playbook_fetches_every_result_file() -> None:
    """Role trainer_service fetches a fixed list of files: every file the trainer writes must be on it."""
    listed = yaml.safe_load((REPO / "roles" / "trainer_service" / "vars" / "main.yml").read_text())
    assert set(RESULT_FILES) <= set(listed["_trainer_service_result_files"])


def test_finished_run_is_refused_unless_overwrite(tmp_path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"complete": False}))
    prepare_run_dir(tmp_path, overwrite=False)  # an unfinished run may be replaced
    assert not (tmp_path / "summary.json").exists()
    (tmp_path / "summary.json").write_text(json.dumps({"complete": True}))
    with pytest.raises(FileExistsError, match="--overwrite"):
        prepare_run_dir(tmp_path, overwrite=False)
    prepare_run_dir(tmp_path, overwrite=True)
    assert not is_complete(tmp_path)


def test_multiaddrs_file(tmp_path) -> None:
    path = write_multiaddrs(tmp_path, ["/ip4/127.0.0.1/tcp/1/p2p/Qm1", "/ip4/10.0.0.2/tcp/1/p2p/Qm1"])
    assert path.read_text().splitlines() == ["/ip4/127.0.0.1/tcp/1/p2p/Qm1", "/ip4/10.0.0.2/tcp/1/p2p/Qm1"]


def test_stats_summary() -> None:
    stats = RunStats(target_loss=0.5)
    reached = [stats.add_step(step(n, 100.0 + n, loss=2.0 - 0.1 * n, wall=float(n))) for n in range(1, 21)]
    stats.add_round(RoundRecord(timestamp=1.0, epoch=1, kind="gradients", outcome="ok"))
    stats.add_round(RoundRecord(timestamp=2.0, epoch=1, kind="gradients", outcome="timeout"))
    summary = stats.summary(
        run_id="r",
        peer_id="p",
        strategy="baseline",
        exit_reason="max_steps",
        start_timestamp=0.0,
        barrier_release_timestamp=0.5,
        start_wait_seconds=0.0,
        end_timestamp=30.5,
        loop_end_timestamp=20.5,
    )
    assert summary["complete"] is True and summary["steps"] == 20 and summary["samples"] == 640
    # the loop's throughput (20 s from the release to the loop's end), not counting the 10 s finish
    assert (summary["wall_seconds"], summary["training_seconds"]) == (30.0, 20.0)
    assert summary["samples_per_second"] == pytest.approx(32.0)
    assert summary["rounds_ok"] == 1 and summary["rounds_failed"] == 1
    # smoothed loss (mean of the last 10 steps) first <= 0.5 at step 20: mean of 0.9 … 0.0 = 0.45
    assert reached.index(True) == 19 and summary["time_to_target_loss_seconds"] == 20.0
    assert summary["final_loss"] == pytest.approx(0.45) and summary["best_loss"] == pytest.approx(0.45)
    assert summary["components"]["compute_seconds"] == {
        "mean": pytest.approx(0.1),
        "p50": pytest.approx(0.1),
        "p95": pytest.approx(0.1),
        "total": pytest.approx(2.0),
    }
    assert percentile([], 0.5) is None and percentile([3.0, 1.0, 2.0], 0.95) == pytest.approx(2.9)


def test_a_rejoining_incarnation_appends_on_the_runs_clock(tmp_path) -> None:
    """A restarted trainer keeps the killed incarnation's rows and the run's first barrier release;
    its rounds go on numbering where the killed one stopped."""
    from experiment.results import REJOIN_FILE, last_step, take_rejoin

    def step(number: int, timestamp: float) -> StepRecord:
        return StepRecord(number, timestamp, 0.1, 0.2, 0.1, 0.0, 0.4, 16, 2.0, 0, 2)

    first = ResultsWriter(tmp_path)
    first.start_clock(1000.0)
    first.write_step(step(1, 1001.0))
    first.write_round(RoundRecord(timestamp=1001.5, epoch=0, kind="gradients", outcome="ok", group_size=2))
    first.flush()  # then SIGKILL: no summary, no close
    (tmp_path / REJOIN_FILE).write_text(json.dumps({"incarnation": 2, "restarted_at": 1010.0}))
    assert take_rejoin(tmp_path) == {"incarnation": 2, "restarted_at": 1010.0}
    assert not (tmp_path / REJOIN_FILE).exists() and last_step(tmp_path) == 1
    again = ResultsWriter(tmp_path, append=True)
    again.start_clock(1020.0)  # its own barrier release: the rows stay on the run's clock
    again.write_step(step(2, 1021.0))
    assert again.write_round(RoundRecord(timestamp=1021.5, epoch=3, kind="gradients", outcome="ok")) == 2
    again.close()
    assert [(s["step"], s["wall_seconds"]) for s in read_steps(tmp_path)] == [(1, 1.0), (2, 21.0)]
    assert [r["round"] for r in read_rounds(tmp_path)] == [1, 2]
    assert json.loads((tmp_path / "started.json").read_text())["barrier_released_at"] == 1000.0
