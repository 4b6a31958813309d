"""The grid runner with ansible-runner against stand-in playbooks (tests/grid/stand_in): progress, status,
continuing past failures, resuming, and Ctrl-C with teardown. The real playbook: test_smoke_end_to_end.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from grid_support import REPO, STAND_IN, small_grid, trainer, write_experiment_json

from controller.grid.spec import load_grid

SMOKE = REPO / "grids" / "smoke.yml"
SMOKE_IDS = [run.experiment_id for run in load_grid(SMOKE).runs]
SMOKE_BASELINES = [run.experiment_id for run in load_grid(SMOKE).runs if run.strategy == "baseline"]


def grid_args(tmp_path: Path, *extra: str, grid: Path = SMOKE) -> list[str]:
    return [
        "grid",
        str(grid),
        "--results-dir",
        str(tmp_path / "results"),
        "--playbook-dir",
        str(STAND_IN),
        "--inventory",
        str(STAND_IN / "inventory.yml"),
        *extra,
    ]


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def status(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "results" / "grid-smoke.status.json").read_text())["runs"]


def test_runs_every_run_continues_past_a_failure_and_retries_it(tmp_path, stand_in_env):
    grid, ids = small_grid(tmp_path, 3)
    failing = ids[1]
    first = trainer(*grid_args(tmp_path, grid=grid), env={**stand_in_env, "GRID_STAND_IN_FAIL": failing})
    assert first.returncode == 1, first.stdout + first.stderr
    assert [f"[{k}/3]" in first.stdout for k in (1, 2, 3)] == [True] * 3
    assert "ETA" in first.stdout and "elapsed" in first.stdout
    runs = status(tmp_path)
    assert [runs[i]["status"] for i in ids] == ["complete", "failed", "complete"]
    assert "stand-in failure" in runs[failing]["message"]
    assert Path(runs[failing]["log"]).exists()
    assert f"failed: {failing}" in first.stdout
    # the failed run's cluster was torn down, then the grid went on
    assert calls(tmp_path)[1:4] == [
        f"experiment {failing} force=False",
        f"teardown {failing}",
        f"experiment {ids[2]} force=False",
    ]

    second = trainer(*grid_args(tmp_path, grid=grid), env=stand_in_env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "3 runs selected, 2 already complete, 1 to run" in second.stdout
    assert calls(tmp_path)[4:] == [f"experiment {failing} force=False"]
    assert status(tmp_path)[failing]["status"] == "complete"
    assert status(tmp_path)[failing]["attempts"] == 2


def test_a_run_whose_compute_strays_from_the_calibration_is_set_aside_and_run_again(tmp_path, stand_in_env):
    """The grid's compute_limit: a complete run outside it is moved to set-aside/ (kept) and run again; one
    that stays outside after compute_reruns is kept, and the status file and the output say so."""
    grid, ids = small_grid(tmp_path, 2)
    strays, steady = ids
    first = trainer(
        *grid_args(tmp_path, grid=grid), env={**stand_in_env, "GRID_STAND_IN_STRAY": f"{strays}:1"}
    )
    assert first.returncode == 0, first.stdout + first.stderr
    # the rerun is forced: the hosts still hold the set-aside run's results, which they would hand back again
    assert calls(tmp_path) == [
        f"experiment {strays} force=False",
        f"experiment {strays} force=True",
        f"experiment {steady} force=False",
    ]
    record = status(tmp_path)[strays]
    assert record["status"] == "complete" and record["message"] == "" and record["attempts"] == 2
    (aside,) = record["set_aside"]
    assert aside["why"] == "received compute outside the calibration's ±5% (step rate: peer-01 0.900)"
    assert Path(aside["path"]) == tmp_path / "results" / "set-aside" / f"{strays}-1"
    kept = json.loads((Path(aside["path"]) / "experiment.json").read_text())
    assert kept["received_compute"]["ratio"] == 0.9
    assert (
        json.loads((tmp_path / "results" / strays / "experiment.json").read_text())["received_compute"][
            "ratio"
        ]
        == 1.0
    )
    assert f"{strays}: received compute outside" in first.stdout and "running it again" in first.stdout
    assert status(tmp_path)[steady]["set_aside"] == []

    # always outside: run 1 + compute_reruns times, the last kept and said
    text = grid.read_text().replace("noise_floor: false\n", "noise_floor: false\ncompute_reruns: 1\n")
    (stubborn_grid := tmp_path / "stubborn.yml").write_text(text)
    (tmp_path / "calls.log").unlink()
    again = trainer(
        *grid_args(tmp_path / "again", grid=stubborn_grid),
        env={**stand_in_env, "GRID_STAND_IN_STRAY": f"{strays}:9"},
    )
    assert again.returncode == 0, again.stdout + again.stderr
    record = json.loads((tmp_path / "again" / "results" / "grid-smoke.status.json").read_text())["runs"][
        strays
    ]
    assert record["status"] == "complete" and len(record["set_aside"]) == 1 and record["attempts"] == 2
    assert record["message"].startswith("kept with received compute outside the calibration's ±5%")
    assert record["message"].endswith("after 1 reruns (compute_reruns)")


def test_a_tightened_limit_and_again_set_complete_runs_aside_once(tmp_path, stand_in_env):
    """The limit holds for every run the grid holds: a run complete within an earlier limit but outside the
    grid's tightened one is set aside when the grid starts and run again; --again does the same for the runs
    it names, once for each commit of the code: the same command then resumes without running them a third
    time, and after another commit runs them again."""
    grid, ids = small_grid(tmp_path, 2)
    strays, steady = ids
    loose = grid.read_text().replace("noise_floor: false\n", "noise_floor: false\ncompute_limit: 0.2\n")
    grid.write_text(loose)
    env = {**stand_in_env, "GRID_STAND_IN_STRAY": f"{strays}:1"}
    assert trainer(*grid_args(tmp_path, grid=grid), env=env).returncode == 0
    assert status(tmp_path)[strays]["set_aside"] == []  # 0.9 was within 20 %

    grid.write_text(loose.replace("compute_limit: 0.2", "compute_limit: 0.05"))
    listed = trainer(*grid_args(tmp_path, "--dry-run", grid=grid), env=env)
    line = next(line for line in listed.stdout.splitlines() if strays in line)
    assert " todo " in line and "(again: received compute outside the calibration's ±5% (step rate" in line
    tightened = trainer(*grid_args(tmp_path, grid=grid), env=env)
    assert tightened.returncode == 0, tightened.stdout + tightened.stderr
    assert f"grid: {strays}: received compute outside the calibration's ±5%" in tightened.stdout
    assert calls(tmp_path)[2:] == [f"experiment {strays} force=True"]
    (aside,) = status(tmp_path)[strays]["set_aside"]
    assert Path(aside["path"]) == tmp_path / "results" / "set-aside" / f"{strays}-1"

    asked = trainer(*grid_args(tmp_path, "--again", "seed == 2", grid=grid), env=env)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert calls(tmp_path)[3:] == [f"experiment {steady} force=True"]
    assert status(tmp_path)[steady]["set_aside"][0]["why"] == "asked to run again (--again)"
    resumed = trainer(*grid_args(tmp_path, "--again", "seed == 2", grid=grid), env=env)
    assert "2 already complete, 0 to run" in resumed.stdout, resumed.stdout
    assert len(calls(tmp_path)) == 4

    # another commit of the code: the same --again runs the run again, once more
    project = tmp_path / "project"
    shutil.copytree(STAND_IN, project / "stand_in")
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "another revision"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    stand_in = project / "stand_in"
    moved = ["--playbook-dir", str(stand_in), "--inventory", str(stand_in / "inventory.yml")]
    committed = [*grid_args(tmp_path, "--again", "seed == 2", grid=grid)[:4], *moved, "--again", "seed == 2"]
    assert trainer(*committed, env=env).returncode == 0
    assert calls(tmp_path)[4:] == [f"experiment {steady} force=True"]
    assert trainer(*committed, env=env).returncode == 0
    assert len(calls(tmp_path)) == 5


def test_resume_skips_complete_results_and_redoes_partial_ones(tmp_path, stand_in_env):
    """Results dirs laid out as the playbook writes them; the runner reads only experiment.json (a real
    trainer's results in them: test_grid_report.py)."""
    results = tmp_path / "results"
    done, partial = SMOKE_BASELINES[0], SMOKE_BASELINES[1]
    for experiment_id, complete in ((done, True), (partial, False)):
        (results / experiment_id / "baseline").mkdir(parents=True)
        (results / experiment_id / "baseline" / "steps.csv").write_text("step,timestamp,loss\n1,1.0,2.3\n")
        write_experiment_json(
            results / experiment_id, strategy="baseline", peers=1, settings={}, complete=complete
        )
    listing = trainer(*grid_args(tmp_path, "--dry-run"), env=stand_in_env)
    assert f"done {done}" in listing.stdout and f"todo {partial}" in listing.stdout
    assert listing.stdout.splitlines()[-2].endswith(f"1 complete, {len(SMOKE_IDS) - 1} to run")

    completed = trainer(*grid_args(tmp_path, "--only", "strategy == 'baseline'"), env=stand_in_env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # the baselines and the grid's noise floor (3 solo runs), which runs whatever --only selects
    assert "6 runs selected, 1 already complete, 5 to run" in completed.stdout
    assert calls(tmp_path)[0] == f"experiment {SMOKE_IDS[0]} force=False"  # the noise floor comes first
    assert f"experiment {partial} force=True" in calls(tmp_path)  # partial results are redone as a whole
    # the complete run's results are kept as they were
    assert (results / done / "baseline" / "steps.csv").read_text() == "step,timestamp,loss\n1,1.0,2.3\n"


def test_ctrl_c_tears_down_and_the_grid_resumes(tmp_path, stand_in_env):
    grid, ids = small_grid(tmp_path, 3)
    slow = ids[1]
    env = {**os.environ, **stand_in_env, "GRID_STAND_IN_SLOW": slow}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", *grid_args(tmp_path, grid=grid)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while f"experiment {slow} force=False" not in calls(tmp_path):
        assert time.monotonic() < deadline and process.poll() is None, "the slow run never started"
        time.sleep(0.2)
    time.sleep(1.0)  # inside the 31.7 s sleep
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "interrupted (run the same command again to resume)" in output
    assert calls(tmp_path)[-1] == f"teardown {slow}"
    runs = status(tmp_path)
    assert [runs[i]["status"] for i in ids] == ["complete", "interrupted", "pending"]
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if b"sleep\x0031.7" in _read(p)]

    resumed = trainer(*grid_args(tmp_path, grid=grid), env=stand_in_env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "3 runs selected, 1 already complete, 2 to run" in resumed.stdout
    experiments = [line for line in calls(tmp_path) if line.startswith("experiment")]
    assert experiments.count(f"experiment {ids[0]} force=False") == 1  # finished runs are not redone
    assert experiments[-2:] == [f"experiment {slow} force=False", f"experiment {ids[2]} force=False"]


def test_runs_needing_more_peers_than_the_inventory_has_are_refused(tmp_path, stand_in_env):
    thesis = REPO / "grids" / "thesis.yml"
    args = grid_args(tmp_path, "--only", "peers == 4")
    args[1] = str(thesis)
    completed = trainer(*args, env=stand_in_env)
    assert completed.returncode == 2
    assert "but the inventory has only 2 hosts in group peers" in completed.stderr
    assert str(thesis) in completed.stderr and ".peers: peers=4" in completed.stderr
    assert calls(tmp_path) == []
    # the whole grid, noise floor included, must fit
    args = grid_args(tmp_path)
    args[1] = str(thesis)
    completed = trainer(*args, env=stand_in_env)
    assert completed.returncode == 2 and "noise-floor.peers: peers=16" in completed.stderr, completed.stderr
    assert calls(tmp_path) == []


def test_a_part_of_the_grid_on_a_smaller_cluster_leaves_the_noise_floor_for_later(tmp_path, stand_in_env):
    """VMs hold one cluster shape at a time: a sitting of the grid's 2-peer runs on 2 VMs leaves the noise
    floor's 16 peers for a sitting that has them, and says so."""
    thesis = REPO / "grids" / "thesis.yml"
    only = "peers == 2 and target_batch_size == 625 and batch_size == 32 and learning_rate == 0.01"
    args = grid_args(tmp_path, "--only", only, "--repeat", "1")
    args[1] = str(thesis)
    completed = trainer(*args, env=stand_in_env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "the noise floor's runs need 16 peers and the inventory has 2" in completed.stdout
    experiments = [line for line in calls(tmp_path) if line.startswith("experiment")]
    assert experiments and not [line for line in experiments if "noise-floor" in line], experiments


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
