"""Helpers for the grid and report tests (imported as `grid_support`, like tests/e2e's e2e_support)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.grid.spec import load_grid

REPO = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).resolve().parent / "stand_in"

TARGET = 2.0
RUN_SETTINGS = {"model": "smallcnn", "dataset": "synthetic", "batch_size": 16, "vcpus": 1}


def trainer(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run the `trainer` command line as a user would (python -m trainer)."""
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def baseline_run(
    results_dir: Path, *, run_id: str, learning_rate: float, steps: int, target: float | None = None
) -> Path:
    """A real, short baseline run of smallcnn on synthetic data into `results_dir` (it stops at `target`)."""
    completed = trainer(
        "run",
        "--strategy",
        "baseline",
        "--model",
        "smallcnn",
        "--dataset",
        "synthetic",
        "--batch-size",
        "16",
        "--learning-rate",
        str(learning_rate),
        "--max-steps",
        str(steps),
        "--run-id",
        run_id,
        "--peer-id",
        "baseline",
        "--results-dir",
        str(results_dir),
        "--metrics-port",
        "-1",
        "--vcpus",
        "1",
        *(["--target-loss", str(target)] if target is not None else []),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return results_dir


def write_experiment_json(
    directory: Path, *, strategy: str, peers: int, settings: dict, complete: bool
) -> None:
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


def hivemind_pair(results_dir: Path, *, run_id: str, learning_rate: float, steps: int) -> Path:
    """A real 2-peer Hivemind run (smallcnn, synthetic) over loopback into results_dir/peer-01, peer-02."""
    common = [
        "run",
        "--strategy",
        "hivemind",
        "--model",
        "smallcnn",
        "--dataset",
        "synthetic",
        "--batch-size",
        "16",
        "--learning-rate",
        str(learning_rate),
        "--max-steps",
        str(steps),
        "--run-id",
        run_id,
        "--metrics-port",
        "-1",
        "--vcpus",
        "1",
        "--target-batch-size",
        "64",
        "--peers",
        "2",
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--start-timeout",
        "120",
        "--matchmaking-time",
        "1",
        "--averaging-timeout",
        "10",
        "--finish-grace",
        "5",
    ]
    env = {**os.environ}
    first_dir = results_dir / "peer-01"
    first = subprocess.Popen(
        [sys.executable, "-m", "trainer", *common, "--peer-id", "peer-01", "--results-dir", str(first_dir)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        addresses = first_dir / "multiaddrs.txt"
        deadline = time.monotonic() + 120
        while not (addresses.exists() and addresses.read_text().strip()):
            assert first.poll() is None and time.monotonic() < deadline, "the bootstrap peer did not come up"
            time.sleep(0.2)
        address = addresses.read_text().split()[0]
        second = trainer(
            *common,
            "--peer-id",
            "peer-02",
            "--results-dir",
            str(results_dir / "peer-02"),
            "--initial-peers",
            address,
            timeout=300,
        )
        assert second.returncode == 0, second.stderr[-2000:]
        _, stderr = first.communicate(timeout=120)
        assert first.returncode == 0, stderr[-2000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    return results_dir


def small_grid(tmp_path: Path, runs: int) -> tuple[Path, list[str]]:
    """A grid of `runs` tiny baseline runs (seeds 1..runs), named smoke so the status file name is shared."""
    path = tmp_path / "small.yml"
    seeds = ", ".join(str(seed) for seed in range(1, runs + 1))
    path.write_text(
        "name: smoke\nnoise_floor: false\n"
        "fixed: {strategy: baseline, peers: 1, model: smallcnn, dataset: synthetic}\n"
        f"blocks:\n  - name: seeds\n    repeats: 1\n    axes: {{seed: [{seeds}]}}\n"
    )
    return path, [run.experiment_id for run in load_grid(path).runs]
