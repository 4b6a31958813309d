"""`trainer calibrate`: samples/s per training process at 1, 2, 4, ... threads, every core busy.

For each batch size and thread count T, ``cores // T`` baseline processes (``trainer run``, the loop of every
run) train at once, each pinned to its own block of T cores with T torch threads, so every core is busy, as
on a cluster of VMs. The samples/s of each process (its summary.json) give the rate of a T-thread process;
their mean, min and max are written to a calibration file (controller/calibration.py reads it). It runs on
every VM (the trainer's wheel), so a real cluster's VMs can be calibrated where they are.

    trainer calibrate --out vm16.json              # 16 cores: 1..16 threads, ResNet18, BS 32 and 128
    trainer calibrate --cores 8 --threads 1,2,4,8 --out vm8.json     # on a VM of each size of a cluster

The local cluster uses it at one thread to learn this machine's own rate (playbooks/validate.yml).
``benchmarks/thread_scaling.py`` runs the same command and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experiment.machine import cpu_model
from experiment.results import CALIBRATION_KIND, read_steps, read_summary

METHOD = (
    "cores/threads processes at once, each pinned to a disjoint block of `threads` cores "
    "(os.sched_setaffinity) with as many torch threads; samples/s per process from `trainer run "
    "--strategy baseline` over its steps after the first two (trainer calibrate)"
)


def core_blocks(count: int, size: int, available: list[int]) -> list[list[int]]:
    """Disjoint blocks of ``size`` cores, ``count`` of them.

    >>> core_blocks(4, 2, list(range(8)))
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    """
    return [available[i * size : (i + 1) * size] for i in range(count)]


def start_pinned(
    command: list[str],
    log_path: Path,
    cores: list[int] | None = None,
    cwd: Path | None = None,
    cgroup_procs: Path | None = None,
    threads: int | None = None,
    wait_policy: str = "PASSIVE",
) -> subprocess.Popen:
    """Start one process in its own session, logging to ``log_path``: pinned to ``cores`` with as many
    threads when given, or in the cgroup whose ``cgroup.procs`` is given. Idle OpenMP threads sleep
    (``wait_policy`` PASSIVE, as the trainer's unit sets them); ACTIVE makes them spin, "" leaves OpenMP's own
    default (spin a while, then sleep)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # `python -m trainer` from any working directory, also where the package is a checkout, not installed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    count = threads or (len(cores) if cores else None)
    if count:
        env.update(OMP_NUM_THREADS=str(count), MKL_NUM_THREADS=str(count), GOMAXPROCS=str(count))
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    else:
        env.pop("OMP_WAIT_POLICY", None)

    def place() -> None:
        if cores:
            os.sched_setaffinity(0, cores)
        if cgroup_procs:
            cgroup_procs.write_text(str(os.getpid()))

    with log_path.open("w") as log:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Hivemind's children go with it
            preexec_fn=place if cores or cgroup_procs else None,
        )


@contextlib.contextmanager
def cpu_quota_cgroups(count: int, cores: float) -> Iterator[list[Path]]:
    """``count`` fresh cgroups, each limited to ``cores`` of CPU (CFS quota, 100 ms period; cgroup v1 or v2,
    needs root); yields their ``cgroup.procs`` files and removes the groups afterwards."""
    v1 = Path("/sys/fs/cgroup/cpu")
    parent = v1 if (v1 / "cpu.cfs_quota_us").exists() else Path("/sys/fs/cgroup")
    groups = [parent / f"testbed-calibrate-{os.getpid()}-{index}" for index in range(count)]
    try:
        for group in groups:
            group.mkdir()
            quota = max(1000, int(cores * 100_000))
            if parent == v1:
                (group / "cpu.cfs_period_us").write_text("100000")
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (group / "cpu.max").write_text(f"{quota} 100000")
        yield [group / "cgroup.procs" for group in groups]
    finally:  # a group empties once its killed processes are gone: give them a few seconds
        deadline = time.monotonic() + 10
        for group in groups:
            while group.exists():
                try:
                    group.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.2)


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


#: the folder that holds the trainer package (and experiment/, which it imports)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]

#: steps left out of a measured rate: the first ones build oneDNN's kernels and warm the caches
WARM_UP_STEPS = 2


def steady_rate(run_dir: Path) -> float | None:
    """Samples/s of a finished run over its steps after the warm-up, from each batch's arrival to its step's
    end (compute and optimizer: the data's loading is the storage's, not the CPU's, and the run's received
    compute is measured the same way, controller/received_compute.py); its summary's rate where it has no
    more steps than that; None where it did not finish."""
    if not (read_summary(run_dir) or {}).get("complete"):
        return None
    steps = read_steps(run_dir)[WARM_UP_STEPS:]
    seconds = sum((row["compute_seconds"] or 0.0) + (row["optimizer_seconds"] or 0.0) for row in steps)
    if not steps or seconds <= 0:
        return (read_summary(run_dir) or {}).get("samples_per_second")
    return sum(row["samples"] for row in steps) / seconds


def measure(
    model: str,
    batch_size: int,
    threads: int,
    available: list[int],
    steps: int,
    work: Path,
    timeout: float,
    shared: tuple[int, float] | None = None,
    data: tuple[str, str | None] = ("synthetic", None),
) -> dict[str, Any]:
    """One thread count: ``len(available) // threads`` pinned processes at once; their samples/s. With
    ``shared`` (processes, cores each): that many one-thread processes at once, unpinned, each under a CPU
    quota of that many cores, as the local cluster's containers share this machine. ``data``: the dataset
    and its directory the processes train on (the rate depends on it: this machine trains ResNet18 on
    Fashion-MNIST faster than on synthetic images, docs/compute-calibration.md)."""
    count = shared[0] if shared else len(available) // threads
    directory = work / f"{model}-bs{batch_size}-t{threads}-n{count}"
    directory.mkdir(parents=True, exist_ok=True)
    processes = []
    with contextlib.ExitStack() as stack:
        procs_files = stack.enter_context(cpu_quota_cgroups(*shared)) if shared else [None] * count
        blocks = [None] * count if shared else core_blocks(count, threads, available)
        try:
            for index, (cores, procs_file) in enumerate(zip(blocks, procs_files, strict=True)):
                out = directory / f"p{index + 1:02d}"
                command = [sys.executable, "-m", "trainer", "run", "--strategy", "baseline", "--model", model]
                command += [
                    "--dataset",
                    data[0],
                    *(["--data-root", data[1]] if data[1] else []),
                    "--batch-size",
                    str(batch_size),
                    "--max-steps",
                    str(steps),
                ]
                command += ["--vcpus", str(threads), "--run-id", f"calibrate-{int(time.time())}"]
                command += ["--peer-id", out.name, "--results-dir", str(out), "--metrics-port", "-1"]
                log = directory / f"{out.name}.log"
                processes.append(
                    start_pinned([*command, "--overwrite"], log, cores, directory, procs_file, threads)
                )
            finished = wait_all(processes, timeout)
        finally:
            stop_all(processes)
    rates = [steady_rate(directory / f"p{i + 1:02d}") for i in range(count)]
    if not finished or not all(isinstance(r, int | float) and r > 0 for r in rates):
        raise RuntimeError(
            f"{model} bs {batch_size}, {threads} threads: a process did not finish (logs in {directory})"
        )
    row = {
        "model": model,
        "batch_size": batch_size,
        "threads": threads,
        "processes": count,
        "samples_per_second": round(statistics.fmean(rates), 3),
        "min": round(min(rates), 3),
        "max": round(max(rates), 3),
        "source": "trainer",
        "dataset": data[0],
    }
    if shared:  # what one core of quota delivers, shared as the local cluster's containers share it
        row.update(
            quota_cores=shared[1], samples_per_core_second=round(row["samples_per_second"] / shared[1], 3)
        )
    return row


def document(available: list[int], steps: int, rates: list[dict[str, Any]]) -> dict[str, Any]:
    """The calibration file's content: the machine, the method and the rates."""
    import torch

    return {
        "kind": CALIBRATION_KIND,
        "measured_on": {
            "cores": len(available),
            "cpu_model": cpu_model(),
            "host": platform.node(),
            "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "steps": steps,
        },
        "method": METHOD,
        "rates": rates,
    }


def combine(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One calibration from repeated ones of the same machine: each rate the mean of the repeats' rates,
    with every repeat's rate kept (``repeats``) and min/max over all their processes.

    >>> row = {"model": "m", "batch_size": 8, "threads": 1, "processes": 2, "source": "trainer"}
    >>> one = {"measured_on": {"cores": 2, "date": "d1"}, "method": "x",
    ...        "rates": [{**row, "samples_per_second": 100.0, "min": 90.0, "max": 110.0}]}
    >>> two = {"measured_on": {"cores": 2, "date": "d2"}, "method": "x",
    ...        "rates": [{**row, "samples_per_second": 120.0, "min": 115.0, "max": 125.0}]}
    >>> (combined,) = combine([one, two])["rates"]
    >>> combined["samples_per_second"], combined["repeats"], combined["min"]
    (110.0, [100.0, 120.0], 90.0)
    >>> combine([one, two])["measured_on"]["repeats"], combine([one, two])["measured_on"]["date"]
    (2, 'd1, d2')
    """
    cores = {document["measured_on"].get("cores") for document in documents}
    if len(cores) != 1:
        raise ValueError(f"repeats of one machine have one core count (got {sorted(map(str, cores))})")
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for document in documents:
        for row in document["rates"]:
            groups.setdefault((row["model"], row["batch_size"], row["threads"]), []).append(row)
    rates = []
    for rows in groups.values():
        repeats = [row["samples_per_second"] for row in rows]
        combined = {**rows[0], "samples_per_second": round(statistics.fmean(repeats), 3), "repeats": repeats}
        for key, pick in (("min", min), ("max", max)):
            if all(key in row for row in rows):
                combined[key] = pick(row[key] for row in rows)
        rates.append(combined)
    measured_on = dict(documents[0]["measured_on"])
    dates = sorted({str(document["measured_on"].get("date")) for document in documents})
    measured_on.update(repeats=len(documents), date=", ".join(dates))
    method = documents[0].get("method", "") + f"; the mean of {len(documents)} repeats (trainer calibrate)"
    return {"kind": CALIBRATION_KIND, "measured_on": measured_on, "method": method, "rates": rates}


ROW = "{:<10} {:>5} {:>7} {:>5} {:>28} {:>10}"


def table(rates: list[dict[str, Any]]) -> list[str]:
    """A line per rate: samples/s per process (min-max), speedup over one thread (same model and batch)."""
    ones = {(r["model"], r["batch_size"]): r["samples_per_second"] for r in rates if r["threads"] == 1}
    lines = [ROW.format("model", "batch", "threads", "procs", "samples/s per process", "x 1 thread")]
    for r in rates:
        one = ones.get((r["model"], r["batch_size"]))
        speedup = f"{r['samples_per_second'] / one:.2f}" if one else "-"
        spread = f"{r['samples_per_second']:.1f}"
        if "min" in r and "max" in r:
            spread += f" ({r['min']:.1f}-{r['max']:.1f})"
        lines.append(ROW.format(r["model"], r["batch_size"], r["threads"], r["processes"], spread, speedup))
    return lines


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--threads", default="1,2,4,8,16", help="thread counts, comma-separated")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-sizes", default="32,128", help="comma-separated")
    parser.add_argument("--steps", type=int, default=60, help="training steps per process")
    parser.add_argument("--dataset", default="synthetic", help="what the processes train on")
    parser.add_argument("--data-root", default=None, help="the dataset's directory (trainer run --data-root)")
    parser.add_argument(
        "--cores", type=int, default=0, help="cores to fill (default: all this process may use)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one thread count may take")
    parser.add_argument(
        "--share",
        help="N:CORES: instead of pinned processes, N one-thread processes at once, unpinned, each under a "
        "CPU quota of CORES (cgroups, root): how the local cluster's containers share this machine",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="measure everything this many times; each rate their mean"
    )
    parser.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="measure nothing: write the mean of these calibration files (repeats of one machine)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the calibration file to write")


def _checked(args: argparse.Namespace) -> str | None:
    """Completes ``args`` (thread_counts, batches, available); the one error, or None."""
    if args.combine:  # nothing is measured: this machine's cores do not matter
        return (
            "--combine measures nothing: leave out --share and --repeats"
            if args.share or args.repeats > 1
            else None
        )
    try:
        args.thread_counts = [int(v) for v in args.threads.split(",") if v]
        args.batches = [int(v) for v in args.batch_sizes.split(",") if v]
    except ValueError:
        return "--threads and --batch-sizes take integers, comma-separated"
    available = sorted(os.sched_getaffinity(0))
    cores = args.cores or len(available)
    if not 1 <= cores <= len(available):
        return f"--cores {args.cores}: this process may use 1 to {len(available)} cores"
    bad = [t for t in args.thread_counts if t < 1 or t > cores]
    if args.repeats < 1:
        return f"--repeats must be >= 1 (got {args.repeats})"
    if bad or not args.thread_counts or min(args.batches, default=0) < 1 or args.steps < 1:
        return f"thread counts must be 1 to {cores} (got {args.threads}); batch sizes and --steps >= 1"
    args.available = available[:cores]
    args.shared = None
    if args.share:
        try:
            count, quota = args.share.split(":")
            args.shared = (int(count), float(quota))
        except ValueError:
            return f"--share takes N:CORES, e.g. 8:0.22 (got {args.share!r})"
        if args.shared[0] < 1 or not 0 < args.shared[1] <= cores or args.thread_counts != [1]:
            return f"--share {args.share}: N >= 1, 0 < CORES <= {cores}, and --threads 1"
    return None


def _read_calibrations(paths: list[Path]) -> list[dict[str, Any]] | str:
    """The calibration files' contents, or the one error."""
    documents = []
    for path in paths:
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            return f"{path}: not a readable JSON file ({exc})"
        if not isinstance(document, dict) or document.get("kind") != CALIBRATION_KIND:
            return f'{path}: not a calibration (its "kind" must be {CALIBRATION_KIND!r})'
        documents.append(document)
    return documents


def _measure_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every batch size and thread count once: a calibration document."""
    rates = []
    with tempfile.TemporaryDirectory(prefix="thread-scaling-") as work:
        for batch_size in args.batches:
            for threads in args.thread_counts:
                started = time.monotonic()
                rates.append(
                    measure(
                        args.model,
                        batch_size,
                        threads,
                        args.available,
                        args.steps,
                        Path(work),
                        args.timeout,
                        args.shared,
                        (args.dataset, args.data_root),
                    )
                )
                print(
                    f"[thread-scaling] {args.model} bs {batch_size}, {threads} threads x "
                    f"{rates[-1]['processes']}: {time.monotonic() - started:.0f} s",
                    flush=True,
                )
    return document(args.available, args.steps, rates)


def main(args: argparse.Namespace) -> int:
    problem = _checked(args)
    documents = _read_calibrations(args.combine) if args.combine and not problem else []
    if isinstance(documents, str):
        problem = documents
    if problem:
        print(f"trainer: error: {problem}", file=sys.stderr)
        return 2
    # stopped (SIGTERM, as a playbook or grid is), end the processes and remove the cgroups on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if not args.combine:
        for repeat in range(args.repeats):
            if args.repeats > 1:
                print(f"[thread-scaling] repeat {repeat + 1} of {args.repeats}", flush=True)
            documents.append(_measure_all(args))
    try:
        calibration = documents[0] if len(documents) == 1 else combine(documents)
    except ValueError as error:
        print(f"trainer: error: {error}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(calibration, indent=2) + "\n")
    on = calibration["measured_on"]
    print(f"\n{on.get('cores')} cores, {on.get('cpu_model')}, {on.get('repeats', 1)} repeat(s)")
    print("\n".join(table(calibration["rates"])))
    print(f"calibration written to {args.out}")
    return 0
