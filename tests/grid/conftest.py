"""Shared helpers for the grid and report tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).resolve().parent / "stand_in"


def trainer(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the `trainer` command line as a user would (python -m trainer)."""
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def baseline_run(results_dir: Path, *, run_id: str, learning_rate: float, steps: int, target: float) -> Path:
    """A real, short baseline run of smallcnn on synthetic data into `results_dir`."""
    completed = trainer(
        "run", "--strategy", "baseline", "--model", "smallcnn", "--dataset", "synthetic",
        "--batch-size", "16", "--learning-rate", str(learning_rate), "--max-steps", str(steps),
        "--target-loss", str(target), "--run-id", run_id, "--peer-id", "baseline",
        "--results-dir", str(results_dir), "--metrics-port", "-1", "--vcpus", "1",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    return results_dir


def write_experiment_json(directory: Path, *, strategy: str, peers: int, settings: dict, complete: bool) -> None:
    """experiment.json as the experiment playbook writes it (docs/architecture.md)."""
    document = {
        "experiment_id": directory.name,
        "strategy": strategy,
        "peers": peers,
        "settings": {"strategy": strategy, "peers": peers, **settings},
        "inventory": "test",
        "hosts": {},
        "storage": {"backend": "local"},
        "started": None,
        "finished": None,
        "complete": complete,
        "incomplete_reason": None if complete else "a peer did not finish",
    }
    (directory / "experiment.json").write_text(json.dumps(document))


@pytest.fixture
def stand_in_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the stand-in playbooks (tests/grid/stand_in)."""
    return {
        "GRID_STAND_IN_CALLS": str(tmp_path / "calls.log"),
        "GRID_STAND_IN_SLOW": "",
        "GRID_STAND_IN_FAIL": "",
    }
