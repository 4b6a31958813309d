"""`trainer grid --sitting`: a sitting starts no run that its estimate says would end after it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from grid_support import small_grid, write_experiment_json

from controller.grid.command import parse_duration
from controller.grid.runner import GridRunner, PlaybookResult
from controller.grid.spec import load_grid


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedPlaybooks:
    """Stands in for the experiment playbook: each run takes `seconds` on the clock and writes its results."""

    def __init__(self, results: Path, clock: Clock, seconds: float) -> None:
        self.results, self.clock, self.seconds, self.started = results, clock, seconds, []

    def run(self, name, extravars, ident, cancel) -> PlaybookResult:
        if name == "experiment.yml":
            self.started.append(extravars["experiment_id"])
            self.clock.now += self.seconds
            (self.results / extravars["experiment_id"]).mkdir(parents=True)
            write_experiment_json(
                self.results / extravars["experiment_id"],
                strategy="baseline",
                peers=1,
                settings={},
                complete=True,
            )
        return PlaybookResult(status="successful", rc=0, log=None)


def grid_of(tmp_path: Path, runs: int):
    return load_grid(small_grid(tmp_path, runs)[0])


def sit(tmp_path: Path, grid, sitting: float | None, seconds: float) -> tuple[int, list[str], str]:
    clock, out = Clock(), io.StringIO()
    playbooks = TimedPlaybooks(tmp_path / "results", clock, seconds)
    runner = GridRunner(
        grid,
        grid.runs,
        results_dir=tmp_path / "results",
        playbooks=playbooks,
        out=out,
        clock=clock,
        sitting=sitting,
    )
    return runner.run(), playbooks.started, out.getvalue()


def test_the_sitting_ends_before_a_run_that_would_not_fit_and_the_next_resumes(tmp_path):
    grid = grid_of(tmp_path, 4)
    ids = [run.experiment_id for run in grid.runs]
    # 100 s a run: the first has no estimate and starts; at 100 s and 200 s the next fits 250 s; at 200 s
    # the third's 100 s would end at 300 s, after the sitting
    code, started, out = sit(tmp_path, grid, 250, 100)
    assert code == 0, out
    assert started == ids[:2]
    assert f"the sitting ends in 50s, before {ids[2]} would (estimated 1m40s); 2 runs left" in out
    code, started, out = sit(tmp_path, grid, 1000, 100)
    assert (code, started) == (0, ids[2:]), out
    assert "4 runs selected, 2 already complete, 2 to run" in out


def test_without_a_sitting_every_run_starts(tmp_path):
    grid = grid_of(tmp_path, 3)
    code, started, out = sit(tmp_path, grid, None, 10_000)
    assert (code, len(started)) == (0, 3), out


def test_a_run_of_an_unpriced_shape_starts_while_time_is_left_and_none_after(tmp_path):
    grid = grid_of(tmp_path, 2)
    code, started, out = sit(tmp_path, grid, 60, 100)  # the first (unpriced) overruns the sitting
    assert started == [grid.runs[0].experiment_id]
    assert "the sitting's 1m00s are over; 1 run left" in out


@pytest.mark.parametrize("text", ["", "2", "1x", "0m", "h"])
def test_a_sitting_that_is_not_a_duration_is_refused(text):
    with pytest.raises(Exception, match="duration|needs some time"):
        parse_duration(text)
