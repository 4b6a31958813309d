"""benchmarks/run_overhead.py on a run written by hand: a grid's job events and the peers' results."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.run_overhead import RUN_PLAY, main, read_runs  # noqa: E402

T0 = datetime.datetime(2026, 11, 28, 3, 0, 0, tzinfo=datetime.UTC)


def _event(directory: Path, counter: int, seconds: float, event: str, **data) -> None:
    created = (T0 + datetime.timedelta(seconds=seconds)).isoformat()
    document = {"counter": counter, "created": created, "event": event, "event_data": data}
    (directory / f"{counter}-x.json").write_text(json.dumps(document))


def _grid_run(results: Path, experiment_id: str) -> None:
    events = results / "grid-smoke.runner" / "artifacts" / f"{experiment_id}-20261128T030000-1" / "job_events"
    events.mkdir(parents=True)
    _event(events, 1, 0, "playbook_on_start")
    _event(events, 2, 0, "playbook_on_play_start", play="Validate")
    _event(events, 3, 1, "playbook_on_task_start", play="Validate", task="Check the settings")
    _event(events, 4, 4, "playbook_on_play_start", play="Install the trainer")
    _event(events, 5, 4, "playbook_on_task_start", play="Install the trainer", task="pip")
    _event(events, 6, 30, "playbook_on_play_start", play=RUN_PLAY)
    _event(events, 7, 30, "playbook_on_task_start", play=RUN_PLAY, task="Wait")
    _event(events, 8, 100, "playbook_on_play_start", play="Record and summarise the experiment")
    _event(events, 9, 110, "playbook_on_stats")
    start = T0.timestamp()
    for peer, last in (("peer-01", 85.0), ("peer-02", 90.0)):
        directory = results / experiment_id / peer
        directory.mkdir(parents=True)
        (directory / "started.json").write_text(json.dumps({"barrier_released_at": start + 45}))
        header = (
            "step,timestamp,wall_seconds,data_seconds,compute_seconds,optimizer_seconds,averaging_seconds,"
        )
        header += "step_seconds,samples,loss,hivemind_epoch,peers,rss_bytes\n"
        row = f"1,{start + last},1,0,1,0,0,1,32,2.3,0,2,1\n"
        (directory / "steps.csv").write_text(header + row)


def test_each_runs_time_is_split_at_the_run_play_the_barrier_and_the_last_step(tmp_path, capsys):
    _grid_run(tmp_path, "hivemind-p2-abc-r1")
    (run,) = read_runs(tmp_path)
    assert run.experiment_id == "hivemind-p2-abc-r1"
    phases = run.phases
    assert phases == pytest.approx(
        {"wall": 110.0, "set-up": 30.0, "to barrier": 15.0, "training": 45.0, "after": 20.0}
    )
    assert dict(run.plays)["Install the trainer"] == pytest.approx(26.0)
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2.4x" in out and "overhead per run (wall - training): 65.0 s" in out, out
    assert out.index("26.0  Install the trainer") < out.index("4.0  Validate"), out


def test_a_run_without_results_still_gets_its_wall_and_nothing_is_one_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    _grid_run(tmp_path, "x-r1")
    for path in (tmp_path / "x-r1").glob("*/started.json"):
        path.unlink()
    (run,) = read_runs(tmp_path)
    assert run.phases["wall"] == pytest.approx(110.0) and run.phases["training"] is None
