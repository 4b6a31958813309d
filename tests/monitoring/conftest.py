"""Fixtures of the monitoring tests: the prometheus role's configuration rendered for a 2-peer inventory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from monitoring_support import PORTS, render_prometheus, write_inventory

PEERS = {
    "peer-01": {"cluster_address": "10.89.64.101"},
    "peer-02": {"cluster_address": "10.89.64.102", "testbed_ports": {**PORTS, "trainer_metrics": 9411}},
}
MONITOR = {"cluster_address": "10.89.64.10"}


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: apt-get install prometheus (make setup)")
    return path


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> tuple[Path, Path]:
    """(prometheus.yml, testbed.rules.yml) rendered by Ansible with the role's defaults."""
    out = tmp_path_factory.mktemp("rendered")
    inventory = write_inventory(out / "inventory.yml", PEERS, MONITOR)
    return render_prometheus(out / "etc", inventory)
