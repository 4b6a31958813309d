"""Facts about the process and host recorded in config.json, and the CPU budget (``--vcpus``) applied to
torch."""

from __future__ import annotations

import logging
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

GIT_REVISION_ENV = "TRAINER_GIT_REVISION"
#: environment variables recorded in config.json's ``cpu``: they decide how much of a CPU quota training gets,
#: and Hivemind's forked processes (DHT, averagers) and p2pd inherit them (docs/study-scale.md)
RUNTIME_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMAXPROCS")


def apply_vcpus(vcpus: int | None) -> dict[str, Any]:
    """Limit torch to ``vcpus`` threads (intra- and inter-op); returns what was applied for config.json.

    The trainer never pins itself: which cores a peer may use is the placement's job (the VM, the local
    cluster's container quota, the study-scale benchmark's affinity), so that the process sees exactly the
    cores it was given. Pinning itself by peer number put every other local peer on the core that also
    carries Ceph and Prometheus (docs/fair-cpu.md). ``None`` leaves torch's defaults.
    """
    applied: dict[str, Any] = {"threads": torch.get_num_threads(), "affinity": _affinity()}
    # how idle OpenMP threads wait and how many processors Go's runtime (p2pd) uses: set by the trainer unit
    applied.update({name.lower(): os.environ.get(name) for name in RUNTIME_ENVIRONMENT})
    if vcpus is None:
        return applied
    if vcpus > 1 and (os.environ.get("OMP_WAIT_POLICY") or "").upper() != "PASSIVE":
        log.warning(
            "OMP_WAIT_POLICY is %s: idle OpenMP threads spin, and every process forked from this one "
            "(Hivemind's averagers) inherits %d threads on the same cores; spinning pools that share "
            "cores computed up to 3.9x slower than sleeping ones (docs/study-scale.md); set "
            "OMP_WAIT_POLICY=PASSIVE",
            os.environ.get("OMP_WAIT_POLICY") or "unset",
            vcpus,
        )
    torch.set_num_threads(vcpus)
    try:
        torch.set_num_interop_threads(vcpus)
    except RuntimeError as exc:  # only settable before the first inter-op parallel work
        log.warning("could not set inter-op threads to %d: %s", vcpus, exc)
    applied.update(threads=torch.get_num_threads(), interop_threads=torch.get_num_interop_threads())
    return applied


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
