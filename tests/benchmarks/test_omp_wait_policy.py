"""benchmarks/omp_wait_policy.py at CI size: two quota-limited containers of the node image, both policies."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/testbed-node:latest"
CFS_PERIOD_SECONDS = 0.1  # the benchmark's default --cpu-period


# its checks are each container's quota and the printed ratios' consistency, which hold on a loaded host
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.load_tolerant
@pytest.mark.extended  # each container's quota: test_local_cluster.py's peers, in their cgroups
def test_both_policies_are_measured_and_compared():
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "images" / "containers.conf"))
    exists = subprocess.run(["podman", "image", "exists", IMAGE], env=env, check=False)
    assert exists.returncode == 0, f"{IMAGE} is missing: run `make image` first"
    command = [sys.executable, "benchmarks/omp_wait_policy.py", "--peers", "2", "--cpus", "0.5",
               "--threads", "2", "--steps", "8"]  # fmt: skip
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {}
    for policy in ("default", "passive"):
        row = rf"^{policy} +([\d.]+)-([\d.]+) +(\d+)% +([\d.]+) +(\d+)% +([\d.]+)-([\d.]+)$"
        match = re.search(row, run.stdout, re.MULTILINE)
        assert match, run.stdout
        fastest, slowest, _, cpu_per_step, _, least_cores, most_cores = (float(v) for v in match.groups())
        assert 0 < fastest <= slowest and cpu_per_step > 0, run.stdout
        # within each container's --cpus 0.5: over a window of a few periods (0.1 s) the CFS quota can be
        # exceeded by what the periods at both ends of the window allow, up to two periods' quota
        assert 0 < least_cores <= most_cores <= 0.5 * (1 + 2 * CFS_PERIOD_SECONDS / fastest), run.stdout
        rows[policy] = (slowest, cpu_per_step)
    ratios = re.search(r"CPU per step ([\d.]+), slowest peer's wall ([\d.]+)$", run.stdout, re.MULTILINE)
    assert ratios, run.stdout
    # the printed ratios are the ones of the rows above (measured in this run, rounded to 2 decimals)
    assert float(ratios.group(1)) == pytest.approx(rows["default"][1] / rows["passive"][1], rel=0.05)
    assert float(ratios.group(2)) == pytest.approx(rows["default"][0] / rows["passive"][0], rel=0.05)
