"""End to end on the embedded local cluster: `experiment.yml -e peers=2` with the dataset on the test Ceph's
CephFS, then the same settings with `dataset_storage=local` (a copy on each container's disk). Both complete,
experiment.json names the backend, and every peer's data-loading time is recorded; the data-loading share of
each run is printed side by side."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from storage_support import REPO, ansible_playbook, image_exists, podman

pytestmark = pytest.mark.slow

SETTINGS = {
    "peers": 2,
    "strategy": "hivemind",
    "model": "smallcnn",
    "dataset": "fashion-mnist",
    "batch_size": 32,
    "max_steps": 30,
    "monitoring": False,
}
INVENTORY = REPO / "inventories" / "local"
# This test's own local cluster (container names, network, subnet), so that it never touches the default one
# (testbed-<host> on 10.89.64.0/24) or another test's.
ISOLATED_CLUSTER = {
    "testbed_container_prefix": "testbed-ceph-",
    "testbed_network": "testbed-ceph",
    "testbed_network_prefix": "10.89.72",
}


def _run_experiment(results_root: Path, storage: str) -> tuple[Path, float]:
    experiment_id = f"ceph-e2e-{storage}-{int(time.time())}"
    extra = {
        **ISOLATED_CLUSTER,
        **SETTINGS,
        "dataset_storage": storage,
        "experiment_id": experiment_id,
        "results_root": str(results_root),
    }
    run = ansible_playbook(
        REPO / "playbooks" / "experiment.yml", INVENTORY, "-e", json.dumps(extra), timeout=1500
    )
    assert run.returncode == 0, f"experiment.yml ({storage}) failed:\n{run.output[-6000:]}"
    return results_root / experiment_id, run.seconds


def _data_share(peer_dir: Path) -> tuple[float, float]:
    """(data-loading seconds, share of step time) of one peer, from its summary.json."""
    components = json.loads((peer_dir / "summary.json").read_text())["components"]
    data, step = components["data_seconds"]["total"], components["step_seconds"]["total"]
    return data, data / step


def _teardown() -> None:
    ansible_playbook(
        REPO / "playbooks" / "teardown.yml", INVENTORY, "-e", json.dumps(ISOLATED_CLUSTER), timeout=300
    )


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    if not image_exists("localhost/testbed-node:latest"):
        pytest.fail("localhost/testbed-node:latest is missing: run `make image` first")
    _teardown()  # a cluster left by an interrupted earlier run
    results_root = tmp_path_factory.mktemp("results")
    try:
        yield {storage: _run_experiment(results_root, storage) for storage in ("cephfs", "local")}
    finally:
        _teardown()
        left = podman("ps", "--all", "--quiet", "--filter", "name=testbed-ceph-", check=False).stdout.strip()
        assert not left, "the isolated cluster's containers are still there"


@pytest.mark.parametrize("storage", ["cephfs", "local"])
def test_experiment_records_its_storage_and_data_loading(experiments, storage: str) -> None:
    results, _ = experiments[storage]
    experiment = json.loads((results / "experiment.json").read_text())
    assert experiment["complete"] is True, experiment.get("incomplete_reason")
    record = experiment["storage"]
    assert record["backend"] == storage
    if storage == "cephfs":
        assert record["source"].startswith("cephfs://client.testbed-ro@10.89.72.5/testfs/"), record
        assert record["fstype"] == "fuse.ceph-fuse" and record["mount_options"].startswith("ro,"), record
    else:
        assert record["source"] == "controller:/usr/share/datasets/fashion-mnist", record
        assert record["fstype"] != "fuse.ceph-fuse" and record["mount_options"], record
    for peer in ("peer-01", "peer-02"):
        with (results / peer / "steps.csv").open() as steps:
            rows = list(csv.DictReader(steps))
        assert rows, f"{peer} recorded no steps"
        assert all(float(row["data_seconds"]) >= 0 for row in rows)
        data, share = _data_share(results / peer)
        assert data > 0 and 0 < share < 1


def test_data_loading_share_cephfs_versus_local(experiments) -> None:
    lines = ["", "storage  run_s  peer     data_s  share_of_step_time"]
    for storage, (results, seconds) in experiments.items():
        for peer in ("peer-01", "peer-02"):
            data, share = _data_share(results / peer)
            lines.append(f"{storage:7}  {seconds:5.0f}  {peer}  {data:6.2f}  {share:6.1%}")
    print("\n".join(lines))
    assert {"cephfs", "local"} == set(experiments)
