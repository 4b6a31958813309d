"""Helpers for the trainer tests: run the real ``trainer`` command (imported by the test modules)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def trainer_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", *args]


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


def wait_for(
    condition: Callable[[], object], timeout: float, what: str, process: subprocess.Popen | None = None
):
    """Poll ``condition`` until truthy; fail naming ``what`` (and the process output if it died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail(f"trainer exited ({process.returncode}) before {what}:\n{output_of(process)}")
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def output_of(process: subprocess.Popen) -> str:
    """The last part of a process's output (started by the ``start_trainer`` fixture)."""
    path = getattr(process, "log_path", None)
    return path.read_text()[-4000:] if path is not None and path.exists() else ""


def small_run_args(results_dir: Path, *extra: str) -> list[str]:
    """A fast baseline: smallcnn on synthetic data, one thread, exporter on a free port."""
    return [
        "--strategy",
        "baseline",
        "--model",
        "smallcnn",
        "--dataset",
        "synthetic",
        "--batch-size",
        "16",
        "--vcpus",
        "1",
        "--results-dir",
        str(results_dir),
        "--metrics-port",
        "0",
        "--metrics-address",
        "127.0.0.1",
        "--run-id",
        "test-run",
        "--peer-id",
        "peer-01",
        *extra,
    ]
