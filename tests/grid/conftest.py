"""Fixtures for the grid and report tests (helpers: grid_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grid_support import RUN_SETTINGS, TARGET, baseline_run, write_experiment_json


@pytest.fixture(scope="session")
def baseline_results(tmp_path_factory) -> Path:
    """Real short baseline runs laid out as the playbook does: 2 repeats of one setting, 1 at another LR."""
    results = tmp_path_factory.mktemp("results")
    for name, lr in (("base-lr0p01-r1", 0.01), ("base-lr0p01-r2", 0.01), ("base-lr0p002-r1", 0.002)):
        # each run measures its time to TARGET in the trainer too (and stops there): a target that ends the
        # run defines the setting (experiment/variables.py), so the repeats share it
        baseline_run(results / name / "baseline", run_id=name, learning_rate=lr, steps=60, target=TARGET)
        settings = {**RUN_SETTINGS, "learning_rate": lr, "max_steps": 60}
        write_experiment_json(results / name, strategy="baseline", peers=1, settings=settings, complete=True)
    return results


@pytest.fixture
def stand_in_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the stand-in playbooks (tests/grid/stand_in)."""
    return {
        "GRID_STAND_IN_CALLS": str(tmp_path / "calls.log"),
        "GRID_STAND_IN_SLOW": "",
        "GRID_STAND_IN_FAIL": "",
    }
