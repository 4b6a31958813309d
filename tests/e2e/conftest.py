"""Fixtures of the end-to-end tests: the local cluster is removed after the session."""

from __future__ import annotations

import subprocess

import pytest
from e2e_support import NODE_IMAGE, environment, extra_vars, run_playbook


@pytest.fixture(scope="session")
def local_cluster():
    """The node image must exist (make image); every container the tests start is removed at the end."""
    image = subprocess.run(["podman", "image", "exists", NODE_IMAGE], env=environment(), check=False)
    assert image.returncode == 0, f"{NODE_IMAGE} is missing: run `make image` first"
    yield
    teardown = run_playbook("teardown.yml", *extra_vars(), timeout=300)
    assert teardown.returncode == 0, teardown.output[-3000:]
