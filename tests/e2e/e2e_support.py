"""Running the experiment playbook against the embedded local cluster (helpers for tests/e2e)."""

from __future__ import annotations

import json
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shared_cluster import BIN, ISOLATED_CLUSTER, REPO, environment


@dataclass
class PlaybookRun:
    returncode: int
    output: str


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


#: the e2e runs keep real time unless a test asks for dilation: their time settings were chosen for it (the
#: grid's end-to-end test runs dilated, as a user's run is by default)
UNDILATED = {"time_dilation": "off"}


def extra_vars(**values: object) -> list[str]:
    """``-e`` arguments as one JSON document (keeps types and lists intact), on the tests' own cluster."""
    return ["-e", json.dumps({**ISOLATED_CLUSTER, **UNDILATED, **values})]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
