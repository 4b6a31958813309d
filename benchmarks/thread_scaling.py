"""A compute calibration of this machine: samples/s per training process at 1, 2, 4, ... threads (issue #33).

For each model, batch size and thread count T, ``cores // T`` baseline processes (``trainer run``, the same
loop as every run) train at once, each pinned to its own block of T cores with T torch threads, so every core
is busy, as on a cluster of VMs. The samples/s of each process (its summary.json) give the rate of a T-thread
process; their mean, min and max are written to a calibration file (controller/calibration.py reads it) and
printed with the speedup over one thread.

    python benchmarks/thread_scaling.py --out results/thread-scaling.json            # 16 cores, ResNet18
    python benchmarks/thread_scaling.py --threads 1,2 --model smallcnn --batch-sizes 16 --steps 20 \\
        --out /tmp/calibration.json                                                    # CI size

Run it once on a VM of each size of the real cluster (``--cores`` = its vCPUs, ``--threads`` up to it) and the
testbed can model that cluster's compute instead of the shipped 16-core machine's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bare_peers import start, stop_all, trainer_command, wait_all  # noqa: E402
from benchmarks.study_scale import core_blocks  # noqa: E402
from controller.calibration import KIND, parse  # noqa: E402
from experiment.results import read_summary  # noqa: E402

METHOD = (
    "cores/threads processes at once, each pinned to a disjoint block of `threads` cores "
    "(os.sched_setaffinity) with as many torch threads; samples/s per process from `trainer run "
    "--strategy baseline` (benchmarks/thread_scaling.py)"
)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(
    args: argparse.Namespace, model: str, batch_size: int, threads: int, work: Path
) -> dict[str, Any]:
    """One thread count: ``cores // threads`` pinned processes at once; their samples/s."""
    blocks = core_blocks(len(args.available) // threads, threads, args.available)
    directory = work / f"{model}-bs{batch_size}-t{threads}"
    processes = []
    try:
        for index, cores in enumerate(blocks):
            out = directory / f"p{index + 1:02d}"
            command = trainer_command(
                *("--strategy", "baseline", "--model", model, "--dataset", "synthetic"),
                *("--batch-size", str(batch_size), "--max-steps", str(args.steps), "--vcpus", str(threads)),
                *("--run-id", f"thread-scaling-{int(time.time())}", "--peer-id", out.name),
                *("--results-dir", str(out), "--metrics-port", "-1", "--overwrite"),
            )
            directory.mkdir(parents=True, exist_ok=True)
            processes.append(start(command, directory / f"{out.name}.log", cores))
        finished = wait_all(processes, args.timeout)
    finally:
        stop_all(processes)
    rates = [
        (read_summary(directory / f"p{i + 1:02d}") or {}).get("samples_per_second")
        for i in range(len(blocks))
    ]
    if not finished or not all(isinstance(r, int | float) and r > 0 for r in rates):
        raise RuntimeError(
            f"{model} bs {batch_size}, {threads} threads: a process did not finish (logs in {directory})"
        )
    return {
        "model": model,
        "batch_size": batch_size,
        "threads": threads,
        "processes": len(blocks),
        "samples_per_second": round(statistics.fmean(rates), 3),
        "min": round(min(rates), 3),
        "max": round(max(rates), 3),
        "source": "trainer",
    }


def calibration(args: argparse.Namespace, rates: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    return {
        "kind": KIND,
        "measured_on": {
            "cores": len(args.available),
            "cpu_model": cpu_model(),
            "host": platform.node(),
            "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "steps": args.steps,
        },
        "method": METHOD,
        "rates": rates,
    }


ROW = "{:<10} {:>5} {:>7} {:>5} {:>28} {:>10}"


def table(rates: list[dict[str, Any]]) -> list[str]:
    """A line per rate: samples/s per process (min-max), speedup over one thread (same model and batch)."""
    ones = {(r["model"], r["batch_size"]): r["samples_per_second"] for r in rates if r["threads"] == 1}
    lines = [ROW.format("model", "batch", "threads", "procs", "samples/s per process", "x 1 thread")]
    for r in rates:
        one = ones.get((r["model"], r["batch_size"]))
        speedup = f"{r['samples_per_second'] / one:.2f}" if one else "-"
        spread = f"{r['samples_per_second']:.1f} ({r['min']:.1f}-{r['max']:.1f})"
        lines.append(ROW.format(r["model"], r["batch_size"], r["threads"], r["processes"], spread, speedup))
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2,4,8,16", help="thread counts, comma-separated")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-sizes", default="32,128", help="comma-separated")
    parser.add_argument("--steps", type=int, default=60, help="training steps per process")
    parser.add_argument(
        "--cores", type=int, default=0, help="cores to fill (default: all this process may use)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one thread count may take")
    parser.add_argument("--out", type=Path, required=True, help="the calibration file to write")
    args = parser.parse_args(argv)
    try:
        args.thread_counts = [int(v) for v in args.threads.split(",") if v]
        args.batches = [int(v) for v in args.batch_sizes.split(",") if v]
    except ValueError:
        parser.error("--threads and --batch-sizes take integers, comma-separated")
    available = sorted(os.sched_getaffinity(0))
    cores = args.cores or len(available)
    if not 1 <= cores <= len(available):
        parser.error(f"--cores {args.cores}: this process may use 1 to {len(available)} cores")
    bad = [t for t in args.thread_counts if t < 1 or t > cores]
    if bad or not args.thread_counts or min(args.batches, default=0) < 1 or args.steps < 1:
        parser.error(f"thread counts must be 1 to {cores} (got {args.threads}); batch sizes and --steps >= 1")
    args.available = available[:cores]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates = []
    with tempfile.TemporaryDirectory(prefix="thread-scaling-") as work:
        for batch_size in args.batches:
            for threads in args.thread_counts:
                started = time.monotonic()
                rates.append(measure(args, args.model, batch_size, threads, Path(work)))
                print(
                    f"[thread-scaling] {args.model} bs {batch_size}, {threads} threads x "
                    f"{rates[-1]['processes']}: {time.monotonic() - started:.0f} s",
                    flush=True,
                )
    document = calibration(args, rates)
    parse(document, str(args.out))  # what the controller will read
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\n{document['measured_on']['cores']} cores, {document['measured_on']['cpu_model']}")
    print("\n".join(table(rates)))
    print(f"calibration written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
