"""scripts/cgroup-volume.sh: the bind mount a local systemd container needs, chosen by the host's cgroups."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HYBRID = """cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
"""
UNIFIED = (
    "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
)
LEGACY = "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n"


def volume(tmp_path: Path, table: str) -> str:
    mounts = tmp_path / "mounts"
    mounts.write_text(table)
    done = subprocess.run(
        [REPO / "scripts" / "cgroup-volume.sh"],
        env={"TESTBED_PROC_MOUNTS": str(mounts), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_hybrid_host_binds_its_unified_hierarchy(tmp_path):
    assert volume(tmp_path, HYBRID) == "/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw"


@pytest.mark.parametrize("table", [UNIFIED, LEGACY], ids=["cgroup-v2", "cgroup-v1-only"])
def test_other_hosts_bind_nothing_systemd_reads(tmp_path, table):
    """On cgroup v2 the path does not exist and podman would refuse the bind: a read-only /dev/null stands in
    (a Molecule scenario lists one volume whatever the host)."""
    assert volume(tmp_path, table) == "/dev/null:/run/testbed-no-cgroup-volume:ro"


def test_this_host_gets_what_its_mount_table_says():
    hybrid = " /sys/fs/cgroup/unified cgroup2 " in Path("/proc/mounts").read_text()
    done = subprocess.run([REPO / "scripts" / "cgroup-volume.sh"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("/sys/fs/cgroup/unified:") == hybrid
