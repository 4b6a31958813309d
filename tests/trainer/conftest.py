"""Fixtures for the trainer tests: real ``trainer run`` processes, always cleaned up."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from trainer_testing import REPO, trainer_command, trainer_env


@pytest.fixture
def start_trainer(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``trainer run ARGS`` in its own process group; every group is killed at teardown."""
    processes: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        """Output goes to a file (``process.log_path``) so a chatty run never blocks on a full pipe."""
        log_path = tmp_path / f"trainer-{len(processes)}.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                trainer_command("run", *args),
                cwd=REPO,
                env=trainer_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = log_path  # type: ignore[attr-defined]
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
