"""The smoke grid end to end on the local cluster (real playbook, containers, Ceph, Hivemind peers), with
`--repeat 1 --only`: the grid's noise floor (two peers training alone), the baseline and the
Hivemind run with local updates (the four-peer run of tests/e2e averages gradients), then `trainer report`
writes every plot and table. One repeat is enough for the
pipeline; repeats, Ctrl-C's teardown and resuming are checked with stand-in playbooks (test_grid_runner.py).
As a user adapts a grid, the test's copy of grids/smoke.yml reads the baseline's dataset from a copy on the
host's disk (dataset_storage=local) while the peers read CephFS, as tests/e2e's runs do, and forms
its groups in 1 s instead of 2 (as tests/trainer's two-peer runs do): with local updates, every step after
the first epoch is an epoch with its own round (docs/hivemind-behaviour.md), so matchmaking was most of that
run's time.
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

from controller.grid.command import select_runs
from controller.grid.spec import load_grid

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
    # in the inventory's own order: the firewall opens testbed_ports in the order they are listed, and a
    # reordered list set up every host's firewall again (not converged: 14 s of the grid's first run)
    cluster.write_text("---\n" + yaml.safe_dump(settings, sort_keys=False))
    return inventory


def adapted_smoke(directory: Path) -> Path:
    """grids/smoke.yml with the baseline block reading its dataset from a local copy, run last, and 1 s
    matchmaking."""
    grid = yaml.safe_load(SMOKE.read_text())
    grid["fixed"]["matchmaking_time"] = 1
    (baseline,) = [block for block in grid["blocks"] if block["name"] == "baseline"]
    baseline["fixed"]["dataset_storage"] = "local"
    # the baseline last: a run that mounts no CephFS stops the warm cluster's storage host, and the next run
    # that mounts it waits for its restart (its metadata server waits out ceph_test_mds_reconnect_timeout for
    # the peers' earlier clients)
    grid["blocks"] = [*(block for block in grid["blocks"] if block is not baseline), baseline]
    path = directory / "smoke.yml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def test_smoke_grid_runs_and_is_reported(tmp_path, local_cluster):
    results = tmp_path / "results"
    smoke = adapted_smoke(tmp_path)
    only = "strategy == 'baseline' or local_updates"
    # the grid's noise floor first (two peers training alone), whatever --only selects
    noise_floor, *ids = [run.experiment_id for run in select_runs(load_grid(smoke, repeats=1), only)]
    assert noise_floor.startswith("noise-floor-solo-p2-") and len(ids) == 2, ids
    ids.reverse()  # the baseline, then the Hivemind run (the grid runs them the other way round)
    assert "baseline" in ids[0] and "hivemind" in ids[1], ids
    status_file = results / "grid-smoke.status.json"
    env = environment()
    command = [
        *(sys.executable, "-m", "trainer", "grid", str(smoke), "--repeat", "1", "--only", only),
        *("--results-dir", str(results), "--inventory", str(shared_inventory(tmp_path))),
    ]
    grid = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert grid.returncode == 0, grid.stdout[-3000:] + grid.stderr[-3000:]
    assert "3 runs selected, 0 already complete, 3 to run" in grid.stdout, grid.stdout[-3000:]
    runs = json.loads(status_file.read_text())["runs"]
    assert [runs[i]["status"] for i in (noise_floor, *ids)] == ["complete"] * 3
    assert [runs[i]["attempts"] for i in (noise_floor, *ids)] == [1, 1, 1]
    experiments = [json.loads((results / i / "experiment.json").read_text()) for i in ids]
    assert all(e["complete"] is True for e in experiments), [e["incomplete_reason"] for e in experiments]
    # the baseline read Fashion-MNIST from its local copy, the peers through their ceph-fuse mounts
    assert [e["storage"]["backend"] for e in experiments] == ["local", "cephfs"], experiments
    baseline = experiments[0]
    assert baseline["peers"] == 1 and list(baseline["hosts"]) == ["peer-01"], baseline["hosts"]
    assert baseline["network"] is None  # no bandwidth to measure for one host
    summary = json.loads((results / ids[0] / "baseline" / "summary.json").read_text())
    assert summary["exit_reason"] == "max_steps" and summary["steps"] == baseline["settings"]["max_steps"]
    _check_dilated(results, ids, experiments)

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
        "loss_smallcnn_fashion-mnist_bs32_lr0.01.png",
    ):
        assert (out / name).stat().st_size > 0, name
    # one run of each setting, no two alike but in one factor: no effect plots, and the report says so
    assert not list(out.glob("effect_*.png")), sorted(out.glob("effect_*.png"))
    assert "No plot for target_batch_size, local_updates, peers," in (out / "report.md").read_text()
    # the data-loading share of the step time, from a local copy and from CephFS
    with open(out / "breakdown.csv", newline="") as handle:
        shares = {row["experiment_id"]: float(row["data_share"]) for row in csv.DictReader(handle)}
    print("\n".join(f"data-loading share of step time, {name}: {v:.1%}" for name, v in shares.items()))
    assert set(shares) == {noise_floor, *ids} and all(0 < share < 1 for share in shares.values()), shares
    with open(out / "time_to_target.csv", newline="") as handle:
        speed = [row for row in csv.DictReader(handle) if row["experiment_id"] == ids[1]]
    assert len(speed) == 1 and {row["baselines"] for row in speed} == {"1"}
    # the noise floor: one solo run (--repeat 1) gives none, only its peers' spread, which the
    # report shows as one run's scheduling and says what a floor needs
    with open(out / "noise_floor.csv", newline="") as handle:
        (floor,) = list(csv.DictReader(handle))
    with open(out / "peers.csv", newline="") as handle:
        solo = [
            float(r["samples_per_second"])
            for r in csv.DictReader(handle)
            if r["experiment_id"] == noise_floor
        ]
    assert len(solo) == 2 and floor["experiment_ids"] == noise_floor and floor["runs"] == "1", floor
    assert floor["floor"] == "" and float(floor["peer_spread"]) == pytest.approx(max(solo) / min(solo) - 1)
    print(f"solo peers' spread: {float(floor['peer_spread']):.1%}")
    assert "Noise floor: not measured: it needs 2 or more `solo` runs" in (out / "report.md").read_text()
    # time to accuracy: the grid evaluates every eval_every steps; the target is the accuracy the
    # baseline reached, so the baseline has a time to it
    assert 0 < float(speed[0]["target_accuracy"]) <= 1, speed
    with open(out / "experiments.csv", newline="") as handle:
        accuracy_times = {r["experiment_id"]: r["time_to_accuracy_seconds"] for r in csv.DictReader(handle)}
    assert float(accuracy_times[ids[0]]) > 0, accuracy_times
    with open(out / "averaging.csv", newline="") as handle:
        averaging = list(csv.DictReader(handle))
    assert {row["peers"] for row in averaging} == {"2"}
    # every Hivemind run averaged at least once (how many rounds succeed depends on the machine's load)
    for experiment_id in ids[1:]:
        assert any(int(row["rounds_ok"]) > 0 for row in averaging if row["experiment_id"] == experiment_id)
    # the report works in modelled time and says so
    with open(out / "experiments.csv", newline="") as handle:
        dilations = {row["experiment_id"]: float(row["time_dilation"]) for row in csv.DictReader(handle)}
    assert dilations == pytest.approx(dict.fromkeys((noise_floor, *ids), experiments[0]["time_dilation"]))
    assert "Times and rates are modelled" in (out / "report.md").read_text()


def _check_dilated(results: Path, ids: list[str], experiments: list[dict]) -> None:
    """The grid's runs are dilated as a user's are by default (time_dilation=auto): 2 vCPUs of
    modelled peers on the 1.75 cores this machine leaves them, D = 2 / 1.75 for both runs. The trainers got
    D, the peers' links were shaped to the modelled 1 Gbit/s / D, and every summary gives modelled times."""
    dilation = 2 / 1.75
    assert [e["time_dilation"] for e in experiments] == pytest.approx([dilation] * 2)
    hivemind = experiments[1]
    for host, record in hivemind["hosts"].items():
        assert record["modelled_bandwidth_mbit"] == 1000.0, host
        assert record["bandwidth_mbit"] == pytest.approx(1000 / dilation, abs=0.01), host
        assert "tbf" in record["link"]["qdisc"], record["link"]  # shaped for the run
    for run_dir in (results / ids[0] / "baseline", *(results / ids[1] / host for host in hivemind["hosts"])):
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        assert config["time_dilation"] == pytest.approx(dilation), run_dir
        assert summary["time_dilation"] == pytest.approx(dilation), run_dir
        modelled = summary["modelled"]
        assert modelled["samples_per_second"] == pytest.approx(summary["samples_per_second"] * dilation)
        step = summary["components"]["step_seconds"]["mean"]
        assert modelled["components"]["step_seconds"]["mean"] == pytest.approx(step / dilation)
