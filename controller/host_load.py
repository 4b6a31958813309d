"""What else ran on the controller's machine during a run: its load and the CPU that its other processes
took. On the local cluster the controller's machine is the cluster, so a run's timings hold only if nothing
else loaded it; experiment.json's ``host_load`` says whether something did.

Two snapshots, one before the peers start (playbooks/run.yml) and one when the record is written
(playbooks/report.yml); between them: the machine's busy CPU (/proc/stat), the CPU of the local cluster's
containers (the podman cgroup parent's accounting, cgroup v1 or v2) and the difference, the CPU that every
other process took (the controller's own Ansible included), and the load averages at both ends. Where the
containers' cgroup is not found (a real cluster, another cgroup manager) only the machine's figures are
recorded.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

#: where podman's cgroupfs manager puts the containers (cgroup v1 per controller, v2 unified)
CONTAINER_CGROUPS_V1 = Path("/sys/fs/cgroup/cpuacct/libpod_parent")
CONTAINER_MEMORY_V1 = Path("/sys/fs/cgroup/memory/libpod_parent")
CONTAINER_CGROUP_V2 = Path("/sys/fs/cgroup/libpod_parent")
_TICKS = os.sysconf("SC_CLK_TCK")


def _busy_seconds(stat: str) -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine from /proc/stat's first line (idle and iowait are idle).

    >>> _busy_seconds("cpu  100 0 50 800 50 0 0 0 0 0\\n")[0] * _TICKS
    150.0
    """
    fields = [int(v) for v in stat.splitlines()[0].split()[1:9]]
    total = sum(fields)
    idle = fields[3] + fields[4]
    return (total - idle) / _TICKS, total / _TICKS


def _containers_cpu_seconds() -> float | None:
    usage = CONTAINER_CGROUPS_V1 / "cpuacct.usage"
    if usage.exists():
        return int(usage.read_text()) / 1e9
    stat = CONTAINER_CGROUP_V2 / "cpu.stat"
    if stat.exists():
        for line in stat.read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


def _containers_memory_peak() -> int | None:
    """The containers' memory high-water mark together (v1: since the last reset; v2: memory.peak)."""
    for path in (CONTAINER_MEMORY_V1 / "memory.max_usage_in_bytes", CONTAINER_CGROUP_V2 / "memory.peak"):
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            continue
    return None


def snapshot(_: Any = None, reset_peak: bool = False) -> dict[str, Any]:
    """The machine now (the filter ``testbed_host_snapshot``). ``reset_peak``: start the containers' memory
    high-water mark again (cgroup v1; as root), so that the end's figure is this run's."""
    if reset_peak:
        with contextlib.suppress(OSError):
            (CONTAINER_MEMORY_V1 / "memory.max_usage_in_bytes").write_text("0")
    busy, total = _busy_seconds(Path("/proc/stat").read_text())
    return {
        "time": time.time(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "cpu_busy_seconds": busy,
        "cpu_total_seconds": total,
        "containers_cpu_seconds": _containers_cpu_seconds(),
        "containers_memory_peak_bytes": _containers_memory_peak(),
    }


def host_load(start: dict[str, Any] | None, end: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """experiment.json's ``host_load`` between two snapshots (``end`` None: now); None without a start.

    >>> start = {"time": 0.0, "load_average": [0.1, 0.2, 0.3], "cpu_busy_seconds": 10.0,
    ...          "cpu_total_seconds": 100.0, "containers_cpu_seconds": 5.0, "containers_memory_peak_bytes": 1}
    >>> end = {"time": 100.0, "load_average": [2.5, 1.0, 0.5], "cpu_busy_seconds": 190.0,
    ...        "cpu_total_seconds": 300.0, "containers_cpu_seconds": 165.0, "containers_memory_peak_bytes": 7}
    >>> load = host_load(start, end)
    >>> load["busy_cores"], load["containers_cores"], load["other_cores"], load["cores"]
    (1.8, 1.6, 0.2, 2.0)
    >>> host_load(None) is None
    True
    """
    if not start:
        return None
    end = end or snapshot()
    wall = end["time"] - start["time"]
    if wall <= 0:
        return None
    busy = (end["cpu_busy_seconds"] - start["cpu_busy_seconds"]) / wall
    record: dict[str, Any] = {
        "host": "the controller's machine",
        "seconds": round(wall, 1),
        "cores": round((end["cpu_total_seconds"] - start["cpu_total_seconds"]) / wall, 2),
        "load_average_start": start["load_average"],
        "load_average_end": end["load_average"],
        "busy_cores": round(busy, 3),
        "containers_cores": None,
        "other_cores": None,
        "containers_memory_peak_bytes": end.get("containers_memory_peak_bytes"),
    }
    if start.get("containers_cpu_seconds") is not None and end.get("containers_cpu_seconds") is not None:
        containers = (end["containers_cpu_seconds"] - start["containers_cpu_seconds"]) / wall
        record["containers_cores"] = round(containers, 3)
        record["other_cores"] = round(max(busy - containers, 0.0), 3)
    return record
