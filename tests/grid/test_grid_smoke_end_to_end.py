"""The smoke grid end to end on the local cluster (real playbook, containers, Ceph, Hivemind peers), with
`--repeat 1 --only`: the baseline and the Hivemind run with local updates (the four-peer run of tests/e2e
averages gradients), then `trainer report` writes every plot and table. One repeat is enough for the
pipeline; repeats, Ctrl-C's teardown and resuming are checked with stand-in playbooks (test_grid_runner.py).
The runs go to the end-to-end tests' shared cluster (tests/shared_cluster.py): when tests/e2e ran first, its
containers are there already and the grid's runs skip most of the bring-up."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grid_support import REPO, trainer
from shared_cluster import ISOLATED_CLUSTER, environment

from trainer.grid.command import select_runs
from trainer.grid.spec import load_grid

SMOKE = REPO / "grids" / "smoke.yml"
PLAYBOOKS = REPO / "playbooks"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not (PLAYBOOKS / "experiment.yml").exists() or not (PLAYBOOKS / "teardown.yml").exists(),
        reason="the experiment playbook is not there",
    ),
]


def shared_inventory(directory: Path) -> Path:
    """A copy of inventories/local on the tests' shared cluster (its three names changed), as a user would
    point `trainer grid --inventory` at an inventory of their own."""
    inventory = directory / "inventory"
    shutil.copytree(REPO / "inventories" / "local", inventory)
    cluster = inventory / "group_vars" / "all" / "cluster.yml"
    settings = yaml.safe_load(cluster.read_text())
    assert set(ISOLATED_CLUSTER) <= set(settings)
    settings.update(ISOLATED_CLUSTER)
    cluster.write_text("---\n" + yaml.safe_dump(settings))
    return inventory


def test_smoke_grid_runs_and_is_reported(tmp_path, local_cluster):
    results = tmp_path / "results"
    only = "strategy == 'baseline' or local_updates"
    ids = [run.experiment_id for run in select_runs(load_grid(SMOKE, repeats=1), only)]
    assert len(ids) == 2, ids
    status_file = results / "grid-smoke.status.json"
    env = environment()
    command = [
        *(sys.executable, "-m", "trainer", "grid", str(SMOKE), "--repeat", "1", "--only", only),
        *("--results-dir", str(results), "--inventory", str(shared_inventory(tmp_path))),
    ]
    grid = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert grid.returncode == 0, grid.stdout[-3000:] + grid.stderr[-3000:]
    assert "2 runs selected, 0 already complete, 2 to run" in grid.stdout, grid.stdout[-3000:]
    runs = json.loads(status_file.read_text())["runs"]
    assert [runs[i]["status"] for i in ids] == ["complete"] * 2
    assert [runs[i]["attempts"] for i in ids] == [1, 1]
    for experiment_id in ids:
        experiment = json.loads((results / experiment_id / "experiment.json").read_text())
        assert experiment["complete"] is True, experiment["incomplete_reason"]
        # every run read Fashion-MNIST through CephFS (the baseline too: tests/e2e has one from a local copy)
        assert experiment["storage"]["backend"] == "cephfs", experiment["storage"]

    report = trainer("report", str(results), "--out", str(tmp_path / "report"), timeout=600)
    assert report.returncode == 0, report.stderr
    out = tmp_path / "report"
    for name in (
        "report.md",
        "experiments.csv",
        "time_to_target.csv",
        "breakdown.csv",
        "averaging.csv",
        "effects.csv",
        "breakdown.png",
        "averaging.png",
        "effect_target_batch_size.png",
        "effect_local_updates.png",
        "effect_peers.png",
        "loss_smallcnn_fashion-mnist_bs32_lr0.01.png",
    ):
        assert (out / name).stat().st_size > 0, name
    with open(out / "time_to_target.csv", newline="") as handle:
        speed = list(csv.DictReader(handle))
    assert len(speed) == 1 and {row["baselines"] for row in speed} == {"1"}
    with open(out / "averaging.csv", newline="") as handle:
        averaging = list(csv.DictReader(handle))
    assert {row["peers"] for row in averaging} == {"2"}
    # every Hivemind run averaged at least once (how many rounds succeed depends on the machine's load)
    for experiment_id in ids[1:]:
        assert any(int(row["rounds_ok"]) > 0 for row in averaging if row["experiment_id"] == experiment_id)
