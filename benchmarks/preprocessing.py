"""Preprocessing strategies against each other: decode every JPEG each step, or decode once into a cached
array, with 0..k DataLoader workers (docs/preprocessing.md; PRESTO, Isenko et al., SIGMOD 2022).

Writes an image-folder dataset from Fashion-MNIST at ``--size`` px JPEG (``trainer imagefolder``) unless
``--data`` already holds one, then runs ``trainer run`` (baseline) once per strategy and worker count on the
same cores and prints, per run: samples/s, data loading and compute per step, the data-loading share of step
time, and the factor between the slowest and the fastest strategy (goal: the cached strategy's data-loading
share < 5 %). Each run's results go to ``--out/<strategy>-w<workers>/baseline`` with an ``experiment.json``,
so ``trainer report --out ...`` reads them.

    python benchmarks/preprocessing.py --out results/preprocessing                 # 224 px, workers 0,1,2
    python benchmarks/preprocessing.py --size 64 --train 300 --steps 20 --workers 0    # CI size
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiment.record import write_experiment  # noqa: E402
from experiment.results import read_summary  # noqa: E402

STRATEGIES = ("decode", "cached")


def run_one(args: argparse.Namespace, strategy: str, workers: int) -> Path:
    name = f"{strategy}-w{workers}"
    experiment = args.out / name
    results = experiment / "baseline"
    command = [
        sys.executable, "-m", "trainer", "run", "--strategy", "baseline", "--model", args.model,
        "--dataset", "imagefolder", "--data-root", str(args.data), "--preprocessing", strategy,
        "--cache-dir", str(args.out / "cache"), "--data-workers", str(workers),
        "--batch-size", str(args.batch_size), "--max-steps", str(args.steps), "--vcpus", str(args.vcpus),
        "--metrics-port", "-1", "--run-id", name, "--results-dir", str(results), "--overwrite",
    ]  # fmt: skip
    log = experiment / "trainer.log"
    experiment.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        done = subprocess.run(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: trainer exited {done.returncode}:\n{log.read_text()[-3000:]}")
    settings = {"strategy": "baseline", "peers": 1, "model": args.model, "dataset": "imagefolder",
                "batch_size": args.batch_size, "learning_rate": 0.01, "max_steps": args.steps,
                "vcpus": args.vcpus, "data_workers": workers, "preprocessing": strategy}  # fmt: skip
    write_experiment(
        experiment, experiment_id=name, strategy="baseline", peers=1, settings=settings, complete=True
    )
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an image-folder dataset (default: written to --out/data)")
    parser.add_argument("--size", type=int, default=224, help="image side of the written dataset (px)")
    parser.add_argument("--train", type=int, default=3000, help="training images of the written dataset")
    parser.add_argument("--workers", default="0,1,2", help="DataLoader worker counts, comma-separated")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--vcpus", type=int, default=1, help="torch threads of the training process")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "preprocessing")
    args = parser.parse_args(argv)
    try:
        args.worker_counts = [int(v) for v in args.workers.split(",") if v]
    except ValueError:
        parser.error("--workers takes integers")
    if any(w < 0 for w in args.worker_counts) or args.steps < 1:
        parser.error("--workers >= 0 and --steps >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.data is None:
        args.data = args.out / "data"
        make = [
            sys.executable, "-m", "trainer", "imagefolder", "--out", str(args.data),
            "--size", str(args.size), "--train", str(args.train), "--val", str(max(10, args.train // 10)),
        ]  # fmt: skip
        subprocess.run(make, cwd=REPO, check=True)
    rows = []
    for strategy in STRATEGIES:
        for workers in args.worker_counts:
            started = time.monotonic()
            summary = read_summary(run_one(args, strategy, workers)) or {}
            components = summary.get("components") or {}
            step = (components.get("step_seconds") or {}).get("total") or 0.0
            data = (components.get("data_seconds") or {}).get("total") or 0.0
            rows.append(
                {
                    "strategy": strategy,
                    "workers": workers,
                    "samples_per_second": summary.get("samples_per_second"),
                    "data_ms": 1000 * ((components.get("data_seconds") or {}).get("mean") or 0.0),
                    "compute_ms": 1000 * ((components.get("compute_seconds") or {}).get("mean") or 0.0),
                    "data_share": data / step if step else None,
                    "seconds": time.monotonic() - started,
                }
            )
            print(f"[preprocessing] {strategy}, {workers} workers: {rows[-1]['seconds']:.0f} s", flush=True)
    (args.out / "preprocessing.json").write_text(json.dumps(rows, indent=2) + "\n")
    described = args.data / "dataset.json"
    record = json.loads(described.read_text()) if described.is_file() else {}
    print(
        f"\ndataset: {args.data} ({record.get('size', '?')} px JPEG); {args.model}, batch {args.batch_size}, "
        f"{args.steps} steps, {args.vcpus} torch thread(s)"
    )
    print(f"{'strategy':<9} {'workers':>7} {'samples/s':>10} {'data ms':>8} {'compute ms':>10} {'share':>7}")
    for row in rows:
        print(
            f"{row['strategy']:<9} {row['workers']:>7} {row['samples_per_second']:>10.1f} "
            f"{row['data_ms']:>8.1f} {row['compute_ms']:>10.1f} {row['data_share']:>7.1%}"
        )
    rates = [row["samples_per_second"] for row in rows if row["samples_per_second"]]
    fastest = max(rows, key=lambda row: row["samples_per_second"] or 0)
    slowest = min(rows, key=lambda row: row["samples_per_second"] or float("inf"))
    print(
        f"fastest: {fastest['strategy']} with {fastest['workers']} workers, "
        f"{max(rates) / min(rates):.1f}x the slowest ({slowest['strategy']}, {slowest['workers']} workers)"
    )
    cached = [row["data_share"] for row in rows if row["strategy"] == "cached"]
    print(f"cached data-loading share: {max(cached):.1%} at most (goal < 5 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
