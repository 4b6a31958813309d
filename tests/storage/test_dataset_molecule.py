"""The dataset role's Molecule `local` scenario (copy from the controller). Its `default` scenario (cephfs
mode against a real test Ceph) runs with every role's default scenario in tests/roles/test_molecule.py."""

from __future__ import annotations

import subprocess

import pytest
from storage_support import BIN, REPO, environment, image_exists

pytestmark = [pytest.mark.slow, pytest.mark.molecule]


def test_dataset_local_scenario() -> None:
    if not image_exists("localhost/testbed-node:latest"):
        pytest.fail("localhost/testbed-node:latest is missing: run `make image` first")
    env = environment()
    env.pop("ANSIBLE_CONFIG", None)
    result = subprocess.run(
        [str(BIN / "molecule"), "test", "--scenario-name", "local"],
        cwd=REPO / "roles" / "dataset",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"molecule test -s local failed:\n{output[-6000:]}"
    assert "idempotence" in output.lower()
