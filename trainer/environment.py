"""Facts about the process and host recorded in config.json, and the CPU budget (``--vcpus``) applied to
torch."""

from __future__ import annotations

import logging
import os
import platform
import re
import socket
import subprocess
import sys
import zlib
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

GIT_REVISION_ENV = "TRAINER_GIT_REVISION"


def apply_vcpus(vcpus: int | None, peer_id: str = "") -> dict[str, Any]:
    """Limit torch to ``vcpus`` threads (intra- and inter-op) and pin the process to ``vcpus`` cores.

    Peers sharing a host get different cores: ``peer-NN`` takes the NN-th block of ``vcpus`` cores (wrapping
    around), other names a block chosen by hash. Affinity is set where the host allows it (a container may
    forbid it); what was applied is returned for config.json. ``None`` leaves torch's defaults and the
    inherited affinity.
    """
    applied: dict[str, Any] = {"threads": torch.get_num_threads(), "affinity": _affinity()}
    if vcpus is None:
        return applied
    torch.set_num_threads(vcpus)
    try:
        torch.set_num_interop_threads(vcpus)
    except RuntimeError as exc:  # only settable before the first inter-op parallel work
        log.warning("could not set inter-op threads to %d: %s", vcpus, exc)
    allowed = _affinity()
    if allowed is not None and vcpus < len(allowed):
        start = (_peer_index(peer_id) * vcpus) % len(allowed)
        cores = [allowed[(start + offset) % len(allowed)] for offset in range(vcpus)]
        try:
            os.sched_setaffinity(0, cores)
        except OSError as exc:
            log.warning("could not pin to %d cores: %s", vcpus, exc)
    applied.update(threads=torch.get_num_threads(), interop_threads=torch.get_num_interop_threads())
    applied["affinity"] = _affinity()
    return applied


def _peer_index(peer_id: str) -> int:
    digits = re.search(r"(\d+)$", peer_id)
    if digits:
        return max(int(digits.group(1)) - 1, 0)
    return zlib.crc32(peer_id.encode())


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def package_versions() -> dict[str, str | None]:
    """Versions of python and the packages that decide the results (hivemind read without importing it)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name, distribution in (
        ("torch", "torch"),
        ("torchvision", "torchvision"),
        ("hivemind", "hivemind"),
        ("trainer", "testbed-trainer"),
    ):
        try:
            versions[name] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
    }


def git_revision() -> str | None:
    """The source revision: ``$TRAINER_GIT_REVISION`` (set by deployments without a checkout), else git."""
    if os.environ.get(GIT_REVISION_ENV):
        return os.environ[GIT_REVISION_ENV]
    source = Path(__file__).resolve().parent
    try:
        result = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None
