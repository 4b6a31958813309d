"""The tests' own local cluster, shared by every end-to-end test that runs the real playbook (tests/e2e,
tests/grid): its own container names, podman network and subnet, so that it never touches the default cluster
(testbed-<host> on 10.89.64.0/24) someone may be using at the same time. One bring-up serves every such test
(the session fixture ``local_cluster`` in tests/conftest.py removes it at the end): the first run creates the
containers, the later runs find them and their roles have little left to do. Its teardown
(playbooks/teardown.yml, as `make clean` runs it) must leave no container, network or process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODE_IMAGE = "localhost/testbed-node:latest"

ISOLATED_CLUSTER = {
    "testbed_container_prefix": "testbed-e2e-",
    "testbed_network": "testbed-e2e",
    "testbed_network_prefix": "10.89.66",
}


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "images" / "containers.conf")
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", PY_COLORS="0")
    return env


def node_image_exists() -> bool:
    found = subprocess.run(["podman", "image", "exists", NODE_IMAGE], env=environment(), check=False)
    return found.returncode == 0


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=environment(), capture_output=True, text=True, check=False)


def container_ids() -> list[str]:
    """The full ids of the tests' cluster's containers (podman labels each with its cluster prefix)."""
    label = f"label=testbed.cluster={ISOLATED_CLUSTER['testbed_container_prefix']}"
    return _podman("ps", "--all", "--no-trunc", "--format", "{{.ID}}", "--filter", label).stdout.split()


def leftovers(removed_ids: list[str]) -> list[str]:
    """What of the tests' cluster is still there: containers, its podman network, and host processes still
    in a removed container's cgroup (podman names each libpod-<id>): Ceph daemons, ceph-fuse, trainers."""
    found = [f"container {cid[:12]}" for cid in container_ids()]
    if _podman("network", "exists", ISOLATED_CLUSTER["testbed_network"]).returncode == 0:
        found.append(f"network {ISOLATED_CLUSTER['testbed_network']}")
    for cgroup in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            text = cgroup.read_text()
        except OSError:  # the process ended meanwhile
            continue
        found += [f"process {cgroup.parent.name} of {cid[:12]}" for cid in removed_ids if cid in text]
    return found


def teardown() -> subprocess.CompletedProcess:
    """playbooks/teardown.yml on the tests' cluster: every container, the network, the podman network."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "teardown.yml")]
        + ["-e", json.dumps(ISOLATED_CLUSTER)],
        cwd=REPO,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
