"""Every Molecule scenario of every role (roles/<role>/molecule/<scenario>), run with `molecule test`.

The scenarios use podman containers from the local images (images/build.sh). Most of a scenario's time
is spent waiting on containers, so the selected scenarios run a few at a time (MOLECULE_PARALLEL, default 3),
each in its own containers and networks; every scenario still passes or fails as its own test.

A scenario whose containers all use the base image carries the marker ``base_image``: `make test` runs those
beside the end of the node image's build (``-m "molecule and base_image"``), and the others once it is built,
but those marked ``extended`` (EXTENDED), which `make test-extended` runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SCENARIOS = sorted(
    f"{path.parents[2].name}/{path.parent.name}" for path in ROLES.glob("*/molecule/*/molecule.yml")
)
BIN = Path(sys.executable).parent
NODE_IMAGE, BASE_IMAGE = "localhost/testbed-node:latest", "localhost/testbed-base:bookworm"
IMAGES = (NODE_IMAGE, BASE_IMAGE)


def _sequence(scenario: str) -> list[str]:
    """The scenario's test sequence: its own where it sets one, else the shared one (.config/molecule)."""
    role, name = scenario.split("/")
    own = yaml.safe_load((ROLES / role / "molecule" / name / "molecule.yml").read_text()) or {}
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    return (own.get("scenario") or {}).get("test_sequence") or shared["scenario"]["test_sequence"]


def _images(scenario: str) -> set[str]:
    """The images of the scenario's platforms (a ``${VAR:-default}`` reference counts as its default)."""
    role, name = scenario.split("/")
    config = yaml.safe_load((ROLES / role / "molecule" / name / "molecule.yml").read_text())
    return {
        re.sub(r"^\$\{\w+:-(.*)\}$", r"\1", platform["image"]) for platform in config.get("platforms", [])
    }


# The scenario that deploys the test Ceph (the dataset role's, which is also roles/ceph_test's), the heaviest:
# alone here about 105-120 core-seconds. The end-to-end tests of `make test` deploy the same Ceph with the
# same playbook (playbooks/storage.yml) and train from CephFS, so `make test` leaves it out (marker extended).
EXTENDED = {"dataset/default"}


def _params() -> list:
    """Every scenario as a parameter, marked ``base_image`` where the base image is its only image, and
    ``extended`` where `make test` leaves it to `make test-extended`."""
    return [
        pytest.param(
            s,
            marks=[
                *([pytest.mark.base_image] if _images(s) == {BASE_IMAGE} else []),
                *([pytest.mark.extended] if s in EXTENDED else []),
            ],
        )
        for s in SCENARIOS
    ]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "images" / "containers.conf")
    env.update(ANSIBLE_FORCE_COLOR="0", PY_COLORS="0", NO_COLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    return env


def _molecule_test(scenario: str, seconds: dict[str, float]) -> subprocess.CompletedProcess:
    role, name = scenario.split("/")
    started = time.monotonic()
    try:
        return _molecule(role, name)
    finally:
        seconds[scenario] = time.monotonic() - started


def _molecule(role: str, name: str) -> subprocess.CompletedProcess:
    # a new ephemeral directory (Molecule's state, inventory, logs) for every run: the shared sequence has no
    # destroy step before create, so an earlier killed run's state ("created") must not skip the create step
    with tempfile.TemporaryDirectory(prefix=f"molecule-{role}-{name}-") as ephemeral:
        return subprocess.run(
            [str(BIN / "molecule"), "test", "--scenario-name", name],
            cwd=ROLES / role,
            env={**_environment(), "MOLECULE_EPHEMERAL_DIRECTORY": ephemeral},
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )


@pytest.fixture(scope="module")
def molecule_runs(request):
    """Starts `molecule test` for every selected scenario (a few at a time); scenario -> its Future."""
    selected = [
        item.callspec.params["scenario"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_molecule_scenario"
    ]
    # only the images the selected scenarios use: the base image's may run before the node image is built
    for image in sorted(set().union(*map(_images, selected))):
        found = subprocess.run(["podman", "image", "exists", image], env=_environment(), check=False)
        assert found.returncode == 0, f"{image} is missing: run `make image` first"
    seconds: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=int(os.environ.get("MOLECULE_PARALLEL", "3"))) as pool:
        runs: dict[str, Future] = {s: pool.submit(_molecule_test, s, seconds) for s in selected}
        yield runs
        for future in runs.values():
            future.cancel()
    _print_wall_times(request.config, seconds)


def _print_wall_times(config: pytest.Config, seconds: dict[str, float]) -> None:
    """Each scenario's wall time, slowest first, on the terminal (past pytest's capture of fixture output)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not seconds:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"Molecule scenarios' wall times ({len(seconds)}, a few at a time):")
        for scenario, wall in sorted(seconds.items(), key=lambda item: -item[1]):
            reporter.write_line(f"  {wall:7.1f} s  {scenario}")


def test_scenarios_are_discovered() -> None:
    roles = {scenario.split("/")[0] for scenario in SCENARIOS}
    assert {"trainer", "hivemind_peer", "baseline", "dataset", "prometheus"} <= roles
    assert {"dataset/default", "dataset/local"} <= set(SCENARIOS)
    # every role has one; the test Ceph's is the dataset role's default, which deploys it as every run does
    # (playbooks/storage.yml): one deployment serves both
    assert roles | {"ceph_test"} == {path.name for path in ROLES.iterdir() if (path / "tasks").is_dir()}
    converge = (ROLES / "dataset" / "molecule" / "default" / "converge.yml").read_text()
    assert "import_playbook: ../../../../playbooks/storage.yml" in converge
    # every platform uses one of the local images; those on the base image alone are marked, to run without
    # the node image (a ${VAR:-default} image counts as its default)
    assert set().union(*map(_images, SCENARIOS)) == set(IMAGES)
    base = {p.values[0] for p in _params() if any(m.name == "base_image" for m in p.marks)}
    assert "prometheus/default" in base and "dataset/default" not in base, base
    assert set(SCENARIOS) >= EXTENDED


@pytest.mark.slow
@pytest.mark.molecule
@pytest.mark.parametrize("scenario", _params())
def test_molecule_scenario(scenario: str, molecule_runs) -> None:
    result = molecule_runs[scenario].result()
    # Ansible's output (the failing task) is on stdout, Molecule's own log on stderr: show the end of both.
    output = f"{result.stdout[-10000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"molecule test failed for {scenario}:\n{output}"
    # a role that acts on every run (shaping, the fault agent) says so in its scenario's sequence; the others
    # must converge a second time without a change
    if "idempotence" in _sequence(scenario):
        assert "idempotence" in (result.stdout + result.stderr).lower()
