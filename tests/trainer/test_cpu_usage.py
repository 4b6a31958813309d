"""The process tree's CPU by role (summary.json cpu_received.process_tree_by_role), on real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import cpu_usage

# spins until the process has used `seconds` of CPU, then sleeps (so its CPU time stays put while read)
SPIN = (
    "import sys, time\n"
    "while time.process_time() < float(sys.argv[1]): pass\n"
    "print('spun', flush=True)\n"
    "time.sleep(60)"
)
# a named-role process that starts a child spinning too (the child counts for its parent's role)
SPIN_WITH_CHILD = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[2], '0.3'], stdout=subprocess.PIPE)\n"
    "child.stdout.readline()\n" + SPIN.replace("sys.argv[1]", "0.3")
)


def _wait_spun(process: subprocess.Popen) -> None:
    assert process.stdout is not None and process.stdout.readline().strip() == "spun"


def test_children_count_for_the_nearest_role_and_p2pd_by_its_name(tmp_path: Path) -> None:
    # a process whose executable is called p2pd (as Hivemind's libp2p daemon) gets the p2pd role by its name
    p2pd = tmp_path / "p2pd"
    p2pd.symlink_to(sys.executable)
    averager = subprocess.Popen(
        [sys.executable, "-c", SPIN_WITH_CHILD, "", SPIN], stdout=subprocess.PIPE, text=True
    )
    daemon = subprocess.Popen([str(p2pd), "-c", SPIN, "0.2"], stdout=subprocess.PIPE, text=True)
    unnamed = subprocess.Popen([sys.executable, "-c", SPIN, "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        for process in (averager, daemon, unnamed):
            _wait_spun(process)
        before = time.process_time()
        by_role = cpu_usage.process_tree_by_role({averager.pid: "state_averager"})
    finally:
        for process in (averager, daemon, unnamed):
            process.kill()
            process.wait()
    assert set(by_role) == {"trainer", "state_averager", "p2pd"}, by_role
    # the averager's own 0.3 s and its child's 0.3 s (/proc counts in clock ticks: a tick's rounding each)
    assert 0.55 <= by_role["state_averager"] < 1.6, by_role
    assert 0.18 <= by_role["p2pd"] < 1.0, by_role
    # this process (pytest) and the unnamed child's 0.2 s count for the trainer
    assert by_role["trainer"] >= before + 0.15, (by_role, before)


def test_a_snapshot_pair_gives_each_roles_seconds_over_the_interval() -> None:
    start = cpu_usage.snapshot({})
    spinner = subprocess.Popen([sys.executable, "-c", SPIN, "0.3"], stdout=subprocess.PIPE, text=True)
    try:
        _wait_spun(spinner)
        end = cpu_usage.snapshot({spinner.pid: "dht"})
    finally:
        spinner.kill()
        spinner.wait()
    document = cpu_usage.received(start, end)
    split = document["process_tree_by_role"]
    assert 0.28 <= split["dht"] < 1.3, split  # a role first seen at the end counts from zero
    assert sum(split.values()) == pytest.approx(document["process_tree_seconds"], abs=0.01)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_cgroup_meter_reads_the_usage_and_the_quota_of_a_container(tmp_path: Path, version: str) -> None:
    """What the pacing reads once a step (trainer/loop.py Pace): a container's CPU seconds and its quota, from
    cgroup v1 (cpu,cpuacct) or v2 files as a container sees them (its own cgroup at the mount's root)."""
    if version == "v1":
        group = tmp_path / "cpu,cpuacct"
        group.mkdir()
        (group / "cpuacct.usage").write_text("2500000000\n")
        (group / "cpu.stat").write_text("nr_periods 10\nnr_throttled 2\nthrottled_time 5\n")
        (group / "cpu.cfs_quota_us").write_text("25000\n")
        (group / "cpu.cfs_period_us").write_text("100000\n")
        proc = "12:cpu,cpuacct:/machine.slice/libpod-x.scope\n"
    else:
        (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nnr_periods 10\n")
        (tmp_path / "cpu.max").write_text("25000 100000\n")
        proc = "0::/\n"
    meter = cpu_usage.cgroup_meter(tmp_path, proc)
    assert meter is not None
    assert meter.usage_seconds() == pytest.approx(2.5) and meter.quota_cores() == pytest.approx(0.25)
    if version == "v2":
        (tmp_path / "cpu.max").write_text("max 100000\n")
        assert meter.quota_cores() is None  # no quota: nothing to pace against
