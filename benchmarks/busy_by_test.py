"""Where a test run's wall time goes and how busy the cores were meanwhile, test by test.

``python benchmarks/busy_by_test.py --out profile.jsonl -- make test`` runs the command and, every two
seconds, records the cores busy since the last sample (from /proc/stat: 2.0 is both cores of this machine)
and which tests run: pytest puts ``PYTEST_CURRENT_TEST`` in the environment of every process a test starts
(ansible-playbook, podman, trainers), so each process's /proc/<pid>/environ names the test that started it.
At the end it prints the run as segments: the test that started last among those seen, how long, how busy.
A test that starts no process shows as ``-``; processes that outlive their test (a container's conmon)
keep its name, so the newest test seen is the one that runs. ``--summarise profile.jsonl`` prints an earlier
record again. This is how `make test`'s end-to-end tests were found to keep one core of two busy
(docs/development.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")
MARK = b"PYTEST_CURRENT_TEST="


def cpu_times() -> tuple[int, int]:
    """(all jiffies, idle + iowait jiffies) of every core since boot, from /proc/stat's first line."""
    fields = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields), fields[3] + fields[4]


def running_tests() -> set[str]:
    """Every pytest node id found in a process's environment, without its phase ("(call)")."""
    found = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        start = environ.find(MARK)
        if start >= 0:
            end = environ.find(b"\0", start)
            value = environ[start + len(MARK) : end if end >= 0 else None].decode(errors="replace")
            found.add(value.rsplit(" (", 1)[0])
    return found


def segments(samples: list[dict], every: float) -> list[dict]:
    """Consecutive samples with the same current test (the newest one seen among those running) merged:
    [{"test", "start" (seconds from the first sample), "seconds", "busy" (mean cores)}].

    >>> s = [{"t": 0, "busy": 1.0, "tests": []}, {"t": 2, "busy": 2.0, "tests": ["a"]},
    ...      {"t": 4, "busy": 1.0, "tests": ["a"]}, {"t": 6, "busy": 0.5, "tests": ["a", "b"]}]
    >>> [(g["test"], g["start"], g["seconds"], g["busy"]) for g in segments(s, 2)]
    [('-', 0, 2, 1.0), ('a', 2, 4, 1.5), ('b', 6, 2, 0.5)]
    """
    first_seen: dict[str, float] = {}
    merged: list[dict] = []
    for sample in samples:
        for test in sample["tests"]:
            first_seen.setdefault(test, sample["t"])
        current = max(sample["tests"], key=first_seen.__getitem__) if sample["tests"] else "-"
        if merged and merged[-1]["test"] == current:
            merged[-1]["busy_samples"].append(sample["busy"])
        else:
            start = sample["t"] - samples[0]["t"]
            merged.append({"test": current, "start": start, "busy_samples": [sample["busy"]]})
    return [
        {
            "test": m["test"],
            "start": m["start"],
            "seconds": len(m["busy_samples"]) * every,
            "busy": sum(m["busy_samples"]) / len(m["busy_samples"]),
        }
        for m in merged
    ]


def record(command: list[str], out: Path, every: float) -> int:
    """Run ``command``, sampling until it ends; return its exit status."""
    process = subprocess.Popen(command)
    previous = cpu_times()
    with out.open("a", buffering=1) as sink:
        while process.poll() is None:
            time.sleep(every)
            now = cpu_times()
            total = (now[0] - previous[0]) or 1
            busy = os.cpu_count() * (1 - (now[1] - previous[1]) / total)
            previous = now
            sample = {"t": round(time.time(), 1), "busy": round(busy, 2), "tests": sorted(running_tests())}
            sink.write(json.dumps(sample) + "\n")
    return process.returncode


def summarise(path: Path, every: float, shortest: float) -> None:
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not samples:
        print(f"{path}: no samples")
        return
    print(f"{'start s':>8} {'seconds':>8} {'cores':>6}  test (segments under {shortest:g} s left out)")
    for segment in segments(samples, every):
        if segment["seconds"] >= shortest:
            test = segment["test"].split("::", 1)[-1]
            print(f"{segment['start']:8.0f} {segment['seconds']:8.0f} {segment['busy']:6.2f}  {test}")
    busy = sum(s["busy"] for s in samples) / len(samples)
    print(f"{len(samples) * every:.0f} s in all, {busy:.2f} of {os.cpu_count()} cores busy on average")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the samples go (JSON lines; appended)")
    parser.add_argument("--summarise", type=Path, help="print an earlier record instead of running")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--shortest", type=float, default=6.0, help="print segments at least this long")
    parser.add_argument("command", nargs="*", help="the command to run, after --")
    args = parser.parse_args(argv)
    if args.summarise:
        summarise(args.summarise, args.every, args.shortest)
        return 0
    if not args.command or not args.out:
        parser.error("give --out FILE and a command after --, or --summarise FILE")
    status = record(args.command, args.out, args.every)
    summarise(args.out, args.every, args.shortest)
    return status


if __name__ == "__main__":
    sys.exit(main())
