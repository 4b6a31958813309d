"""The CPU a run actually received, for summary.json's ``cpu_received`` (docs/architecture.md).

Two views, both as differences between a snapshot at the start barrier's release and one at the end:

- ``cgroup``: the control group the trainer runs in (on the local cluster: its container; on a VM: the service
  or the VM's root), from cgroup v2 ``cpu.stat`` or v1 ``cpuacct.usage`` + ``cpu.stat``: CPU seconds used and
  the CFS quota's periods, throttled periods and throttled seconds. Absent where no cgroup file is readable.
- ``process_tree``: user+system seconds of the trainer and every descendant alive at the snapshot (Hivemind's
  averager processes, p2pd), plus what reaped children used. Correct also where several peers share one cgroup
  (bare processes on one machine). ``process_tree_by_role`` splits it by the process each second was spent in
  (``trainer``: the training loop's process; the roles a strategy names, e.g. Hivemind's ``dht``,
  ``state_averager``, ``grad_averager``; Go's ``p2pd``), each process counting for the nearest of itself and
  its ancestors that has a role.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 mounts cpuacct and cpu together or apart
V1_USAGE_MOUNTS = ("cpu,cpuacct", "cpuacct,cpu", "cpuacct")
V1_STAT_MOUNTS = ("cpu,cpuacct", "cpuacct,cpu", "cpu")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: the role of the process tree's root, and of every process no named role is above
TRAINER_ROLE = "trainer"
#: processes counted by their command name wherever they run (libp2p's daemon, started by Hivemind's DHT)
ROLES_BY_COMMAND = {"p2pd": "p2pd"}


@dataclass(frozen=True)
class CpuSnapshot:
    taken: float
    tree_seconds: float
    cgroup: dict[str, float] | None
    cgroup_path: str | None
    tree_by_role: dict[str, float] = field(default_factory=dict)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def _cgroup_paths(proc_cgroup: str) -> dict[str, str]:
    """controller (or "" for v2) -> path, from the text of /proc/self/cgroup."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _candidate_dirs(mount: Path, path: str) -> list[Path]:
    """The cgroup's directory under ``mount``: the full path, else the mount itself (a container's cgroup
    namespace or a bind mount shows its own cgroup at the mount's root)."""
    full = mount / path.lstrip("/")
    return [full, mount] if full != mount else [mount]


def _first_with(root: Path, mounts: tuple[str, ...], path: str, filename: str) -> Path | None:
    for mount_name in mounts:
        for directory in _candidate_dirs(root / mount_name, path):
            if (directory / filename).is_file():
                return directory
    return None


def read_cgroup(
    root: Path = CGROUP_ROOT, proc_cgroup: str | None = None
) -> tuple[dict[str, float], str] | None:
    """CPU accounting of this process's cgroup: ``usage_seconds``, ``periods``, ``throttled_periods``,
    ``throttled_seconds``; with the directory read. None where nothing is readable."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    paths = _cgroup_paths(proc_cgroup)
    if "cpuacct" in paths:  # cgroup v1: cpuacct and cpu mounted together or apart
        usage_dir = _first_with(root, V1_USAGE_MOUNTS, paths["cpuacct"], "cpuacct.usage")
        if usage_dir is not None:
            stat_dir = _first_with(root, V1_STAT_MOUNTS, paths.get("cpu", "/"), "cpu.stat")
            stat = _read_keyed(stat_dir / "cpu.stat") if stat_dir is not None else {}
            return {
                "usage_seconds": (_read_int(usage_dir / "cpuacct.usage") or 0) / 1e9,
                "periods": float(stat.get("nr_periods", 0)),
                "throttled_periods": float(stat.get("nr_throttled", 0)),
                "throttled_seconds": stat.get("throttled_time", 0) / 1e9,
            }, str(usage_dir)
    if "" in paths:  # cgroup v2
        for directory in _candidate_dirs(root, paths[""]):
            stat = _read_keyed(directory / "cpu.stat")
            if "usage_usec" in stat:
                return {
                    "usage_seconds": stat["usage_usec"] / 1e6,
                    "periods": float(stat.get("nr_periods", 0)),
                    "throttled_periods": float(stat.get("nr_throttled", 0)),
                    "throttled_seconds": stat.get("throttled_usec", 0) / 1e6,
                }, str(directory)
    return None


def cgroup_meter(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> CgroupMeter | None:
    """This process's cgroup's CPU usage and quota, read cheaply once a step (the pacing's, trainer/loop.py);
    None where no cgroup file is readable."""
    found = read_cgroup(root, proc_cgroup)
    if found is None:
        return None
    directory = Path(found[1])
    v1 = (directory / "cpuacct.usage").is_file()
    quota_dir = directory
    if v1:  # cpu and cpuacct may be mounted apart: the quota is the cpu controller's
        text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
        quota_dir = _first_with(root, V1_STAT_MOUNTS, _cgroup_paths(text).get("cpu", "/"), "cpu.cfs_quota_us")
    return CgroupMeter(directory, v1, quota_dir)


@dataclass(frozen=True)
class CgroupMeter:
    """Reads one cgroup's CPU seconds used (all its processes) and its CFS quota in cores."""

    directory: Path
    v1: bool
    quota_dir: Path | None

    def usage_seconds(self) -> float | None:
        if self.v1:
            used = _read_int(self.directory / "cpuacct.usage")
            return None if used is None else used / 1e9
        used = _read_keyed(self.directory / "cpu.stat").get("usage_usec")
        return None if used is None else used / 1e6

    def quota_cores(self) -> float | None:
        """The quota over the period (None: no quota, or unreadable)."""
        if self.quota_dir is None:
            return None
        if self.v1:
            quota = _read_int(self.quota_dir / "cpu.cfs_quota_us")
            period = _read_int(self.quota_dir / "cpu.cfs_period_us")
        else:
            try:
                limit, span = (self.quota_dir / "cpu.max").read_text().split()[:2]
            except (OSError, ValueError):
                return None
            quota, period = (None if limit == "max" else int(limit)), int(span)
        if quota is None or quota <= 0 or not period:
            return None
        return quota / period


def _proc_times(pid: int) -> tuple[float, float, int, str] | None:
    """(own seconds, reaped children's seconds, parent pid, command) of one process, from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (
        (utime + stime) / _TICKS,
        (cutime + cstime) / _TICKS,
        int(fields[1]),
        text[text.index("(") + 1 : text.rindex(")")],
    )


def process_tree_by_role(
    roles: Mapping[int, str] | None = None, root_pid: int | None = None
) -> dict[str, float]:
    """CPU seconds of ``root_pid`` (default: this process), its live descendants and their reaped children,
    by role: ``roles`` names processes (pid -> role), a process named in ROLES_BY_COMMAND gets that role, and
    any other counts for its parent's (the root's: ``trainer``).
    """
    root_pid = os.getpid() if root_pid is None else root_pid
    roles = roles or {}
    children: dict[int, list[int]] = {}
    times: dict[int, tuple[float, float, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        found = _proc_times(int(entry.name))
        if found is not None:
            times[int(entry.name)] = (found[0], found[1], found[3])
            children.setdefault(found[2], []).append(int(entry.name))
    by_role: dict[str, float] = {}
    pending = [(root_pid, TRAINER_ROLE)]
    while pending:
        pid, inherited = pending.pop()
        own, reaped, command = times.get(pid, (0.0, 0.0, ""))
        role = roles.get(pid) or ROLES_BY_COMMAND.get(command) or inherited
        by_role[role] = by_role.get(role, 0.0) + own + reaped
        pending.extend((child, role) for child in children.get(pid, []))
    return by_role


def snapshot(roles: Mapping[int, str] | None = None) -> CpuSnapshot:
    """The cgroup's and the process tree's CPU now; ``roles``: see process_tree_by_role."""
    found = read_cgroup()
    by_role = process_tree_by_role(roles)
    return CpuSnapshot(
        taken=time.monotonic(),
        tree_seconds=sum(by_role.values()),
        cgroup=found[0] if found else None,
        cgroup_path=found[1] if found else None,
        tree_by_role=by_role,
    )


def received(start: CpuSnapshot, end: CpuSnapshot) -> dict[str, Any]:
    """summary.json's ``cpu_received``: what the run got between two snapshots.

    >>> a = CpuSnapshot(10.0, 5.0, {"usage_seconds": 1.0, "periods": 0.0, "throttled_periods": 0.0,
    ...                             "throttled_seconds": 0.0}, "/sys/fs/cgroup/cpu")
    >>> b = CpuSnapshot(20.0, 9.0, {"usage_seconds": 6.0, "periods": 100.0, "throttled_periods": 40.0,
    ...                             "throttled_seconds": 2.5}, "/sys/fs/cgroup/cpu")
    >>> r = received(a, b)
    >>> r["cpu_seconds"], r["cores_used"], r["process_tree_seconds"], r["throttled_fraction"]
    (5.0, 0.5, 4.0, 0.4)
    >>> a = CpuSnapshot(0.0, 3.0, None, None, {"trainer": 2.0, "dht": 1.0})
    >>> b = CpuSnapshot(2.0, 9.5, None, None, {"trainer": 6.0, "dht": 2.5, "p2pd": 1.0})
    >>> received(a, b)["process_tree_by_role"]
    {'dht': 1.5, 'p2pd': 1.0, 'trainer': 4.0}
    """
    wall = max(end.taken - start.taken, 1e-9)
    document: dict[str, Any] = {
        "wall_seconds": wall,
        "process_tree_seconds": end.tree_seconds - start.tree_seconds,
        # a role's processes started after the first snapshot count from zero
        "process_tree_by_role": {
            role: round(seconds - start.tree_by_role.get(role, 0.0), 3)
            for role, seconds in sorted(end.tree_by_role.items())
        },
        "source": "process_tree",
    }
    if start.cgroup is not None and end.cgroup is not None:
        delta = {key: end.cgroup[key] - start.cgroup[key] for key in start.cgroup}
        document.update(
            source="cgroup",
            cgroup=end.cgroup_path,
            cpu_seconds=delta["usage_seconds"],
            periods=int(delta["periods"]),
            throttled_periods=int(delta["throttled_periods"]),
            throttled_seconds=delta["throttled_seconds"],
            throttled_fraction=delta["throttled_periods"] / delta["periods"] if delta["periods"] else 0.0,
        )
    else:
        document["cpu_seconds"] = document["process_tree_seconds"]
    document["cores_used"] = document["cpu_seconds"] / wall
    return document
