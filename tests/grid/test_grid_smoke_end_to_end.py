"""The smoke grid end to end on the local cluster (real playbook, containers, Ceph, Hivemind peers), with
`--repeat 1`: 1 baseline + 2 Hivemind runs, interrupted with Ctrl-C during the first Hivemind run, resumed
(the finished run is not redone), then `trainer report` writes every plot and table. One repeat is enough
for the pipeline; repeats themselves are checked with stand-in playbooks (test_grid_runner.py)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from grid_support import REPO, trainer

from trainer.grid.spec import load_grid

SMOKE = REPO / "grids" / "smoke.yml"
PLAYBOOKS = REPO / "playbooks"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.timeout(5400),
    pytest.mark.skipif(
        not (PLAYBOOKS / "experiment.yml").exists() or not (PLAYBOOKS / "teardown.yml").exists(),
        reason="the experiment playbook is not there",
    ),
]


# This test's own local cluster (container names, podman network, subnet): it never touches the default
# cluster (testbed-<host>) or another test's: a copy of inventories/local with these three values changed.
PREFIX, NETWORK, SUBNET = "testbed-grid-", "testbed-grid", "10.89.67"


def own_inventory(directory: Path) -> Path:
    inventory = directory / "inventory"
    shutil.copytree(REPO / "inventories" / "local", inventory)
    cluster = inventory / "group_vars" / "all" / "cluster.yml"
    settings = yaml.safe_load(cluster.read_text())
    assert {"testbed_container_prefix", "testbed_network", "testbed_network_prefix"} <= set(settings)
    settings.update(testbed_container_prefix=PREFIX, testbed_network=NETWORK, testbed_network_prefix=SUBNET)
    cluster.write_text("---\n" + yaml.safe_dump(settings))
    return inventory


def local_cluster_containers() -> list[str]:
    listing = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}", "--filter", f"label=testbed.cluster={PREFIX}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listing.stdout.split()


@pytest.fixture
def own_cluster(tmp_path):
    """This test's inventory; its containers are removed afterwards (a finished grid leaves them running)."""
    inventory = own_inventory(tmp_path)
    yield inventory
    subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            str(PLAYBOOKS / "teardown.yml"),
            "-i",
            str(inventory),
        ],
        cwd=REPO,
        env={**os.environ, "CONTAINERS_CONF": str(REPO / "images" / "containers.conf")},
        capture_output=True,
        timeout=600,
    )


def test_smoke_grid_interrupted_resumed_and_reported(tmp_path, own_cluster):
    results = tmp_path / "results"
    ids = [run.experiment_id for run in load_grid(SMOKE, repeats=1).runs]
    assert len(ids) == 3, ids
    status_file = results / "grid-smoke.status.json"
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "images" / "containers.conf")}
    inventory = own_cluster
    command = [
        *(sys.executable, "-m", "trainer", "grid", str(SMOKE), "--repeat", "1"),
        *("--results-dir", str(results), "--inventory", str(inventory)),
    ]
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # interrupt the first Hivemind run once it has been running for a while
        deadline = time.monotonic() + 3600
        while True:
            assert process.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the baseline run did not finish in time"
            runs = json.loads(status_file.read_text())["runs"] if status_file.exists() else {}
            second = runs.get(ids[1], {})
            if second.get("status") == "running" and time.time() - second["started"] > 20:
                break
            time.sleep(2)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=900) == 130
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    first = (tmp_path / "first.log").read_text()
    assert "interrupted (run the same command again to resume)" in first, first[-3000:]
    runs = json.loads(status_file.read_text())["runs"]
    assert [runs[i]["status"] for i in ids] == ["complete", "interrupted", "pending"], first[-3000:]
    assert local_cluster_containers() == []  # torn down

    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "3 runs selected, 1 already complete, 2 to run" in resumed.stdout
    runs = json.loads(status_file.read_text())["runs"]
    assert [runs[i]["status"] for i in ids] == ["complete"] * 3
    assert [runs[i]["attempts"] for i in ids] == [1, 2, 1]  # the finished run was not redone
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
    assert len(speed) == 2 and {row["baselines"] for row in speed} == {"1"}
    with open(out / "averaging.csv", newline="") as handle:
        averaging = list(csv.DictReader(handle))
    assert {row["peers"] for row in averaging} == {"2"}
    # every Hivemind run averaged at least once (how many rounds succeed depends on the machine's load)
    for experiment_id in ids[1:]:
        assert any(int(row["rounds_ok"]) > 0 for row in averaging if row["experiment_id"] == experiment_id)
