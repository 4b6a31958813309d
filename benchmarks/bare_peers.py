"""Bare ``trainer run`` processes for the benchmarks: started as a user would, each in its own session.

Shared by ``study_scale.py`` (pinned core blocks) and ``round_soak.py`` (staggered starts): the bootstrap peer
writes ``multiaddrs.txt``, the others join it; every process runs in its own process group, so stopping it
ends Hivemind's children (DHT, averagers, p2pd) with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def trainer_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", "run", *args]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (e.g. a DDP rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], log_path: Path, cores: list[int] | None = None) -> subprocess.Popen:
    """Start one process, logging to ``log_path``; pinned to ``cores`` (threads to match) when given."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if cores:  # as the trainer unit sets them (roles/trainer_service): threads, and idle threads sleep
        threads = str(len(cores))
        env.update(
            OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, GOMAXPROCS=threads, OMP_WAIT_POLICY="PASSIVE"
        )
    with log_path.open("w") as log:
        return subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Hivemind's children go with it
            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
        )


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


def wait_all(processes: list[subprocess.Popen], timeout: float) -> bool:
    """Wait until every process exited or ``timeout`` passed; True when all exited in time."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in processes):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def stop_all(processes: list[subprocess.Popen]) -> None:
    """SIGKILL every process group (a no-op for those that already exited and took their children along)."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    for process in processes:
        process.wait()
