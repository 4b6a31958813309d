"""benchmarks/round_soak.py: failed rounds counted per phase and cause, and one real repetition at CI size."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import round_soak  # noqa: E402
from experiment.results import ROUND_CAUSES, ResultsWriter, RoundRecord  # noqa: E402


def test_docstring_examples():
    result = doctest.testmod(round_soak)
    assert result.attempted > 0 and result.failed == 0


def _peer(run_dir: Path, name: str, rounds: list[RoundRecord], stop_epoch: int) -> None:
    writer = ResultsWriter(run_dir / name)
    for record in rounds:
        writer.write_round(record)
    writer.write_summary({"exit_reason": "collective_finish", "strategy_details": {"stop_epoch": stop_epoch}})
    writer.close()


def test_failed_rounds_are_counted_per_phase_and_cause(tmp_path):
    run = tmp_path / "run-01"

    def row(epoch: int, outcome: str = "ok", **extra) -> RoundRecord:
        return RoundRecord(timestamp=1.0 + epoch, epoch=epoch, kind="gradients", outcome=outcome, **extra)

    _peer(run, "peer-01", [row(0, "timeout"), row(1), row(2), row(3), row(4), row(5)], stop_epoch=6)
    _peer(
        run,
        "peer-02",
        [row(0), row(2, "failed", allreduce_seconds=0.4, error="AllreduceException: x"), row(5, "failed",
         cause="behind", error="behind: ...")],
        stop_epoch=6,
    )  # fmt: skip
    figures = round_soak.figures(run)
    assert figures["peers"] == 2 and figures["complete"] == 2 and figures["stop_epoch"] == 6
    assert (figures["rounds_ok"], figures["rounds_failed"]) == (6, 3)
    assert figures["by_phase"] == {"first": 1, "middle": 1, "last2": 1, "past": 0}
    expected = dict.fromkeys(ROUND_CAUSES, 0) | {"no_group": 1, "peer_left": 1, "behind": 1}
    assert figures["by_cause"] == expected
    assert {(f["peer"], f["epoch"], f["cause"]) for f in figures["failed"]} == {
        ("peer-01", 0, "no_group"),
        ("peer-02", 2, "peer_left"),
        ("peer-02", 5, "behind"),
    }
    lines = round_soak.table([figures])
    assert lines[-1].split()[:9] == ["all", "(1", "runs)", "2", "2", "6", "6", "3", "1"], lines


@pytest.mark.slow
@pytest.mark.hivemind
@pytest.mark.cluster
@pytest.mark.extended  # its rounds are those of test_hivemind_runs.py's peers, counted by the tests above
@pytest.mark.timeout(600)
def test_one_repetition_of_two_staggered_peers(tmp_path):
    out = tmp_path / "soak"
    command = [sys.executable, "benchmarks/round_soak.py", "--repetitions", "1", "--peers", "2"]
    command += ["--steps", "30", "--stagger", "3", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    soak = json.loads((out / "soak.json").read_text())
    (figures,) = soak["runs"]
    assert figures["complete"] == 2 and figures["rounds_ok"] > 0, figures
    assert set(figures["by_cause"]) == set(ROUND_CAUSES)
    # the failed rounds it counts are the ones rounds.csv holds
    assert figures["rounds_failed"] == len(figures["failed"])
    assert any(line.startswith("all (1 runs)") for line in run.stdout.splitlines()), run.stdout
