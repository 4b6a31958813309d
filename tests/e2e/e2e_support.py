"""Running the experiment playbook against the embedded local cluster (helpers for tests/e2e)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODE_IMAGE = "localhost/testbed-node:latest"


@dataclass
class PlaybookRun:
    returncode: int
    output: str


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "images" / "containers.conf")
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", PY_COLORS="0")
    return env


def run_playbook(playbook: str, *extra: str, timeout: float = 1200) -> PlaybookRun:
    """Run a playbook from playbooks/ with extra arguments; return its exit status and combined output."""
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / playbook), *extra],
        cwd=REPO,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(result.returncode, result.stdout)


# The tests' own local cluster: its own container names, podman network and subnet, so that it never touches
# the default cluster (testbed-<host> on 10.89.64.0/24) someone may be using at the same time.
ISOLATED_CLUSTER = {
    "testbed_container_prefix": "testbed-e2e-",
    "testbed_network": "testbed-e2e",
    "testbed_network_prefix": "10.89.66",
}


def extra_vars(**values: object) -> list[str]:
    """``-e`` arguments as one JSON document (keeps types and lists intact), on the tests' own cluster."""
    return ["-e", json.dumps({**ISOLATED_CLUSTER, **values})]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
