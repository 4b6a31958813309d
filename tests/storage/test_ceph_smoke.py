"""Ceph smoke: the project's storage.yml deploys the test Ceph into a storage container, stages a small
dataset into CephFS, two peer containers mount it with the dataset role (ceph-fuse) and read identical bytes;
teardown leaves no process, mount, container or network behind."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import pytest
from storage_support import PLAYBOOKS, ContainerCluster, ansible_playbook, image_exists

pytestmark = pytest.mark.slow

CEPH = "ceph --conf /var/lib/ceph-test/ceph.conf"
STORAGE, PEER_1, PEER_2 = "ceph-smoke-storage", "ceph-smoke-peer-01", "ceph-smoke-peer-02"
HOSTS = {STORAGE: ("storage", 5), PEER_1: ("peers", 101), PEER_2: ("peers", 102)}
DATASET = "smoke-set"


def _sha256_tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _remote_sha256_tree(
    cluster: ContainerCluster, host: str, root: str, timeout: float = 60
) -> dict[str, str]:
    out = cluster.shell(host, f"cd {root} && find . -type f -print0 | xargs -0 sha256sum", timeout=timeout)
    return {
        name.removeprefix("./"): digest for digest, name in (line.split(None, 1) for line in out.splitlines())
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A small dataset: random binaries (one nested) and a text file."""
    root = tmp_path_factory.mktemp("smoke") / DATASET
    (root / "nested").mkdir(parents=True)
    (root / "images.bin").write_bytes(os.urandom(24 * 1024 * 1024))
    (root / "labels.txt").write_text("".join(f"{i % 10}\n" for i in range(1000)))
    (root / "nested" / "extra.bin").write_bytes(os.urandom(100 * 1024))
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, source: Path):
    if not image_exists():
        pytest.fail("the node image is missing: run `make image` (or set STORAGE_TEST_IMAGE)")
    cluster = ContainerCluster(network="ceph-smoke", subnet_prefix="10.89.70", hosts=HOSTS)
    try:
        cluster.start()
        inventory = cluster.write_inventory(tmp_path_factory.mktemp("inventory") / "hosts.yml")
        run = ansible_playbook(
            PLAYBOOKS / "storage-and-dataset.yml",
            inventory,
            "-e", f"dataset={DATASET}",
            "-e", f"dataset_local_source={source}",
        )  # fmt: skip
        assert run.returncode == 0, f"storage-and-dataset.yml failed:\n{run.output[-5000:]}"
        print(f"\nstorage.yml + dataset role on 3 fresh containers: {run.seconds:.0f} s")
        yield cluster, run
    finally:
        cluster.remove()


def test_measure_ceph_start_and_read_throughput(cluster) -> None:
    """Measured, not asserted beyond sanity: the daemons' start-to-active time and read rates (runs first, so
    the ceph-fuse read is the first one of that file on that peer; the local read bypasses the page cache)."""
    cluster, _ = cluster
    stamps = cluster.shell(
        STORAGE,
        "for u in ceph-test@mon.a ceph-test-stage; do "
        "systemctl show --property ActiveEnterTimestampMonotonic --value $u.service; done",
    ).split()
    mon_started, stage_mounted = (int(value) / 1e6 for value in stamps)
    ceph_start = stage_mounted - mon_started
    assert 0 < ceph_start < 300
    rates = {}
    for label, path in (
        ("ceph-fuse cold", f"/mnt/datasets/{DATASET}/images.bin"),
        ("local disk", "/var/tmp/i.bin"),
    ):
        host = PEER_2
        if label == "local disk":
            cluster.shell(host, f"cp /mnt/datasets/{DATASET}/images.bin /var/tmp/i.bin && sync")
        direct = "iflag=direct" if label == "local disk" else ""
        out = cluster.shell(host, f"dd if={path} of=/dev/null bs=4M {direct} 2>&1 | tail -1")
        rates[label] = re.search(r"([\d.,]+ [kMG]B/s)", out).group(1)
    print(f"\nCeph mon start -> CephFS mounted on the storage host: {ceph_start:.1f} s; reads: {rates}")


def test_both_peers_read_the_staged_bytes(cluster, source: Path) -> None:
    cluster, run = cluster
    expected = _sha256_tree(source)
    for peer in (PEER_1, PEER_2):
        mount = cluster.shell(peer, "findmnt --noheadings --output FSTYPE,OPTIONS /mnt/datasets").split()
        assert mount[0] == "fuse.ceph-fuse", f"{peer}: /mnt/datasets is {mount}"
        assert mount[1].startswith("ro,"), f"{peer}: the dataset mount is not read-only: {mount}"
        assert _remote_sha256_tree(cluster, peer, f"/mnt/datasets/{DATASET}") == expected, peer
    # each peer is its own CephFS client: two sessions on the MDS besides the storage host's staging mount
    sessions = cluster.shell(STORAGE, f"{CEPH} tell mds.a session ls 2>/dev/null | grep -c testbed-ro")
    assert int(sessions) == 2
    key = cluster.shell(STORAGE, f"{CEPH} auth print-key client.testbed-ro").strip()
    assert key and key not in run.output, "the client key was printed by the playbook"


def test_restart_keeps_the_data_and_the_mounts(cluster, source: Path) -> None:
    """Restart every daemon at once (the memstore OSD saves on a clean stop and reloads): the staged bytes are
    still there and the peers' ceph-fuse mounts reconnect. Prints the restart-to-mounted time."""
    cluster, _ = cluster
    daemons = "ceph-test@mon.a ceph-test@mgr.x ceph-test@osd.0 ceph-test@mds.a"
    cluster.shell(STORAGE, f"systemctl stop ceph-test-stage {daemons}", timeout=90)
    started = time.monotonic()
    # the staging unit is a ceph-fuse mount (Type=forking): it starts once the MDS serves the file system
    cluster.shell(
        STORAGE,
        f"systemctl start {daemons} && for i in $(seq 240); do "
        "systemctl start ceph-test-stage 2>/dev/null && break; sleep 0.25; done; "
        "mountpoint -q /var/lib/ceph-test/mnt",
        timeout=120,
    )
    print(f"\nTest Ceph restart (4 daemons) -> CephFS mounted again: {time.monotonic() - started:.1f} s")
    expected = _sha256_tree(source)
    for peer in (PEER_1, PEER_2):
        assert _remote_sha256_tree(cluster, peer, f"/mnt/datasets/{DATASET}", timeout=120) == expected, peer


def test_teardown_leaves_nothing(cluster) -> None:
    cluster, _ = cluster
    for peer in (PEER_1, PEER_2):
        cluster.exec(peer, "systemctl", "stop", "testbed-dataset-cephfs.service")
        assert cluster.exec(peer, "mountpoint", "-q", "/mnt/datasets", check=False).returncode != 0
        assert cluster.exec(peer, "pgrep", "-f", "ceph-fuse", check=False).returncode != 0, (
            f"ceph-fuse on {peer}"
        )
    cluster.exec(STORAGE, "systemctl", "stop", "ceph-test-stage.service", timeout=60)
    cluster.shell(
        STORAGE,
        f"{CEPH} --connect-timeout 5 fs fail testfs >/dev/null 2>&1; "
        "systemctl stop ceph-test@mds.a ceph-test@osd.0 ceph-test@mgr.x && systemctl stop ceph-test@mon.a",
        timeout=90,
    )
    left = cluster.shell(STORAGE, "pgrep -a -f 'ceph-(mon|mgr|osd|mds|fuse)' || true").strip()
    assert left == "", f"Ceph processes left on the storage host: {left}"
    container_ids = cluster.container_ids()
    cluster.remove()
    assert cluster.leftovers() == []
    assert _host_processes_in(container_ids) == [], "processes of the removed containers are still running"


def _host_processes_in(container_ids: list[str]) -> list[str]:
    """Host processes whose cgroup names one of the containers (podman puts each in libpod-<id>)."""
    found = []
    for cgroup in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            text = cgroup.read_text()
        except OSError:
            continue
        if any(cid in text for cid in container_ids):
            found.append(cgroup.parent.name)
    return found
