"""What a training process and its children run: threads, thread settings and CPU, from /proc.

A Hivemind peer is several processes: the trainer, the averagers it forks (gradients, state), the DHT's
process and its Go daemon p2pd. Each has its own thread pools. ``census(session)`` lists every process of a
session (the benchmarks start each peer in its own) with its thread count, the environment that sizes its
pools (``OMP_NUM_THREADS``, ``OMP_WAIT_POLICY``, ``GOMAXPROCS``) and the CPU seconds it has used;
``Sampler`` takes one every few seconds while a configuration runs, and ``summarise`` turns them into the
CPU cores each kind of process used while it was seen.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")
ENVIRONMENT = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMAXPROCS")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, session id, CPU seconds of the process: user + system, its threads included)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): session is field 6, utime 14, stime 15
    return comm, int(fields[3]), (int(fields[11]) + int(fields[12])) / TICKS


def _environment(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    found = {key.decode(): value.decode(errors="replace") for key, value in pairs}
    return {name: found[name] for name in ENVIRONMENT if name in found}


def kind(comm: str, is_leader: bool) -> str:
    """A short name for what the process is: the session's leader is the trainer; Hivemind's forked Python
    children (DHT, averagers) keep the trainer's name and are numbered in ``census`` by their start.

    >>> kind("python", True)
    'trainer'
    >>> kind("p2pd", False)
    'p2pd'
    """
    return "trainer" if is_leader else comm


def census(session: int) -> list[dict[str, Any]]:
    """Every live process of ``session``: pid, kind, threads, CPU seconds and its thread settings."""
    processes = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[1] != session:
            continue
        comm, _, cpu = stat
        try:
            threads = len(list((entry / "task").iterdir()))
        except OSError:
            continue
        processes.append(
            {
                "pid": int(entry.name),
                "kind": kind(comm, int(entry.name) == session),
                "threads": threads,
                "cpu_seconds": cpu,
                "environment": _environment(int(entry.name)),
            }
        )
    processes.sort(key=lambda p: p["pid"])
    children = [p for p in processes if p["kind"].startswith("python")]
    for number, process in enumerate(children, 1):  # pids grow with the start (no wrap within a run)
        process["kind"] = f"python child {number}"
    return processes


class Sampler:
    """Censuses of some sessions every ``interval`` seconds in a thread, until ``stop()``."""

    def __init__(self, sessions: dict[str, int], interval: float = 3.0) -> None:
        self.sessions = sessions
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError, ValueError):
                self.samples.append(
                    {"time": time.monotonic(), "peers": {n: census(s) for n, s in self.sessions.items()}}
                )

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def summarise(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per peer and kind of process: how many, their threads (most seen), the cores they used (each process
    over the samples it appeared in: CPU seconds over wall seconds) and their thread settings."""
    seen: dict[tuple[str, int], list[tuple[float, dict[str, Any]]]] = {}
    for sample in samples:
        for peer, processes in sample["peers"].items():
            for process in processes:
                seen.setdefault((peer, process["pid"]), []).append((sample["time"], process))
    # a child's number in one census depends on which children were alive then (one that ended first
    # renumbers the others): number each peer's children once, by pid, over every sample
    children: dict[str, list[int]] = {}
    for (peer, pid), appearances in sorted(seen.items()):
        if appearances[0][1]["kind"].startswith("python child"):
            children.setdefault(peer, []).append(pid)
    summary: dict[str, dict[str, Any]] = {}
    for (peer, pid), appearances in sorted(seen.items()):
        (t0, first), (t1, last) = appearances[0], appearances[-1]
        numbered = children.get(peer, [])
        name = f"python child {numbered.index(pid) + 1}" if pid in numbered else last["kind"]
        row = summary.setdefault(peer, {}).setdefault(
            name, {"processes": 0, "threads": 0, "cores": 0.0, "environment": first["environment"]}
        )
        row["processes"] += 1
        row["threads"] += max(process["threads"] for _, process in appearances)
        if t1 > t0:
            row["cores"] += (last["cpu_seconds"] - first["cpu_seconds"]) / (t1 - t0)
    return summary
