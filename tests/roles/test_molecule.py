"""Every role's Molecule scenario (roles/*/molecule/default), run with `molecule test`.

The scenarios use podman containers from the local node image (scripts/build-image.sh); roles of every part of
the project are discovered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SCENARIO_ROLES = sorted(path.parents[2].name for path in ROLES.glob("*/molecule/default/molecule.yml"))
BIN = Path(sys.executable).parent


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "images" / "containers.conf")
    env.update(ANSIBLE_FORCE_COLOR="0", PY_COLORS="0", NO_COLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    return env


def test_scenarios_are_discovered() -> None:
    assert {"trainer", "hivemind_peer", "baseline"} <= set(SCENARIO_ROLES)


@pytest.mark.slow
@pytest.mark.molecule
@pytest.mark.parametrize("role", SCENARIO_ROLES)
def test_molecule_scenario(role: str) -> None:
    image = subprocess.run(
        ["podman", "image", "exists", "localhost/testbed-node:latest"], env=_environment(), check=False
    )
    assert image.returncode == 0, "localhost/testbed-node:latest is missing: run `make image` first"
    result = subprocess.run(
        [str(BIN / "molecule"), "test"],
        cwd=ROLES / role,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    # Ansible's output (the failing task) is on stdout, Molecule's own log on stderr: show the end of both.
    assert result.returncode == 0, (
        f"molecule test failed for {role}:\n{result.stdout[-10000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
    )
