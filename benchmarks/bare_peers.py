"""Bare ``trainer run`` processes for the benchmarks: started as a user would, each in its own session.

Shared by ``study_scale.py`` (pinned core blocks) and ``round_soak.py`` (staggered starts): the bootstrap peer
writes ``multiaddrs.txt``, the others join it; every process runs in its own process group, so stopping it
ends Hivemind's children (DHT, averagers, p2pd) with it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from trainer.calibrate import start_pinned, stop_all, wait_all  # noqa: F401 (the benchmarks' helpers)

REPO = Path(__file__).resolve().parents[1]


def trainer_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", "run", *args]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (e.g. a DDP rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(
    command: list[str],
    log_path: Path,
    cores: list[int] | None = None,
    wait_policy: str = "PASSIVE",
) -> subprocess.Popen:
    """Start one process from the repository, logging to ``log_path``; pinned to ``cores`` (as many threads)
    when given, with OpenMP's ``wait_policy`` (calibrate.start_pinned)."""
    return start_pinned(command, log_path, cores, cwd=REPO, wait_policy=wait_policy)


def wait_for_multiaddr(path: Path, process: subprocess.Popen, timeout: float = 120) -> str:
    """The first address the bootstrap peer wrote to ``path``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().split()[0]
        if process.poll() is not None:
            raise RuntimeError(f"the bootstrap peer exited ({process.returncode}) before writing {path}")
        time.sleep(0.2)
    raise RuntimeError(f"no multiaddr in {path} after {timeout} s")
