"""Measures the CPU a host receives under full load: do peers declared equal get equal CPU (docs/fair-cpu.md)?

A run's own CPU use (summary.json ``cpu_received``) also falls when a peer waits (an averaging round, a failed
round), so equal peers with unequal waits use unequal CPU however fair the placement. The probe removes the
waits: ``--workers`` processes spin for ``--seconds``, each wanting a whole core all the time, and the CPU
seconds they received over that window are the host's capacity. Started on every peer at one wall-clock time
(``--start-at``, Unix seconds; the hosts' clocks agree), the probes contend as the peers will, so an unfair
placement (peers sharing a core with each other or with the infrastructure) shows as unequal ``cores_used``.

Prints one JSON line: ``workers``, ``seconds`` (the window), ``cpu_seconds`` (the workers' user + system
time), ``cores_used`` (their quotient), ``late_seconds`` (how long after ``--start-at`` the workers started;
the window overlaps the others' by that much less).

    trainer cpuprobe --workers 2 --seconds 5 --start-at 1795000000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from typing import Any


def _spin(until: float) -> None:
    """Keep one core busy until the wall-clock time `until`."""
    while time.time() < until:
        for _ in range(10_000):
            pass


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def probe(workers: int, seconds: float, start_at: float | None = None) -> dict[str, Any]:
    """Spin `workers` processes for `seconds` from `start_at` (now when None); the CPU they received.

    >>> result = probe(1, 0.3)
    >>> result["workers"], 0.0 < result["cores_used"] <= 1.1, result["late_seconds"]
    (1, True, 0.0)
    """
    if workers < 1 or seconds <= 0:
        raise ValueError("workers must be >= 1 and seconds > 0")
    now = time.time()
    if start_at is not None and start_at > now:
        time.sleep(start_at - now)
    begin = time.time()  # at or after start_at
    late = 0.0 if start_at is None else max(0.0, begin - start_at)
    until = begin + seconds
    context = multiprocessing.get_context("fork")
    before = _children_cpu_seconds()
    processes = [context.Process(target=_spin, args=(until,), daemon=True) for _ in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    window = time.time() - begin
    cpu_seconds = _children_cpu_seconds() - before
    return {
        "workers": workers,
        "seconds": round(window, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        "cores_used": round(cpu_seconds / window, 4),
        "late_seconds": round(late, 4),
    }


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``trainer cpuprobe`` (trainer/cli.py)."""
    parser.add_argument("--workers", type=int, default=1, help="busy processes (the host's vCPUs or fewer)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the measured window")
    parser.add_argument("--start-at", type=float, default=None, help="Unix time to start at (default: now)")


def main(args: argparse.Namespace) -> int:
    try:
        result = probe(args.workers, args.seconds, args.start_at)
    except ValueError as exc:
        print(f"trainer: error: cpuprobe: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0
