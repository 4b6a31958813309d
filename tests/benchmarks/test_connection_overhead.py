"""benchmarks/connection_overhead.py at CI size: two containers, one round of tasks per connection."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


# it checks that both connections ran every task and were compared, not how fast: it holds on a loaded host
@pytest.mark.slow
@pytest.mark.load_tolerant
def test_both_connections_run_every_task_and_are_compared():
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "images" / "containers.conf"))
    command = [sys.executable, "benchmarks/connection_overhead.py", "--hosts", "2", "--tasks", "1"]
    run = subprocess.run([*command, "--repeats", "1"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    for connection in ("containers.podman.podman", "testbed_podman"):
        row = rf"^{re.escape(connection)} +([\d.]+) +([\d.]+) +([\d.]+)$"
        match = re.search(row, run.stdout, re.MULTILINE)
        assert match and float(match[1]) > 0 and float(match[3]) > 0, run.stdout
    for measured in ("wall", "CPU"):
        ratio = re.search(rf"^ratio \(median {measured}, .*\): ([\d.]+)$", run.stdout, re.MULTILINE)
        assert ratio and float(ratio[1]) > 0, run.stdout
    leftover = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}}"], env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
    assert "tb-connbench-" not in leftover.stdout
