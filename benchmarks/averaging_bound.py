"""Hivemind's all-reduce of a model-sized state against its bandwidth bound, on shaped links.

For each peer count and link rate: ``--peers`` Hivemind peers (bare processes, one network namespace each,
links shaped with tbf in both directions: benchmarks/shaped_netns.py) average a float32 tensor the size of
the model's parameters (``--model resnet18``: 44.7 MB, 11.2 M parameters with 10 classes) ``--rounds`` times
(benchmarks/allreduce_peers.py).
It prints, per configuration: the median matchmaking seconds (apart), the median all-reduce seconds (the
slowest peer of each round), the bound ``2 (n-1)/n * M / B`` of an all-reduce that moves every byte at the
link rate, and their ratio (goal: <= 1.5 at 1 Gbit/s for 2 and 4 peers). Needs root (network namespaces).

    python benchmarks/averaging_bound.py --out results/averaging-bound     # 2, 4, 8 peers at 100 and 1000
    python benchmarks/averaging_bound.py --peers 2 --rates 100 --size-mb 4 --rounds 2  # CI size
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.allreduce_peers import run_collective  # noqa: E402
from benchmarks.shaped_netns import benchmark_preflight  # noqa: E402
from controller.report.metrics import bandwidth_bound  # noqa: E402


def bound_seconds(peers: int, size_bytes: float, rate_mbit: float, latency_ms: float = 0.0) -> float:
    """The all-reduce's alpha-beta bound (controller/report/metrics.py ``bandwidth_bound``): each peer sends
    and receives 2 (n-1)/n of the state at the link rate, plus one link delay in each of the two phases.

    >>> round(bound_seconds(2, 44.7e6, 1000), 4)
    0.3576
    >>> round(bound_seconds(4, 44.7e6, 100), 3), round(bound_seconds(4, 44.7e6, 100, latency_ms=20), 3)
    (5.364, 5.404)
    """
    return bandwidth_bound(peers, size_bytes, rate_mbit * 1e6 / 8, latency_ms / 1000)


def per_round(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """One entry per round: matchmaking (median over peers) and all-reduce (the slowest peer).

    >>> per_round([{"round": 0, "matchmaking_seconds": 1.0, "allreduce_seconds": 2.0},
    ...            {"round": 0, "matchmaking_seconds": 3.0, "allreduce_seconds": 2.5}])
    [{'matchmaking_seconds': 2.0, 'allreduce_seconds': 2.5}]
    """
    rounds: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        rounds.setdefault(row["round"], []).append(row)
    return [
        {
            "matchmaking_seconds": median(r["matchmaking_seconds"] for r in group),
            "allreduce_seconds": max(r["allreduce_seconds"] for r in group),
        }
        for _, group in sorted(rounds.items())
    ]


def model_bytes(name: str) -> int:
    from trainer.models import build_model

    return 4 * sum(p.numel() for p in build_model(name).parameters())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default="2,4,8", help="peer counts, comma-separated")
    parser.add_argument("--rates", default="100,1000", help="link rates in Mbit/s, comma-separated")
    parser.add_argument("--model", default="resnet18", help="the state is this model's parameters")
    parser.add_argument("--size-mb", type=float, help="the state's size in MB instead of a model's")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after one warm-up)")
    parser.add_argument("--matchmaking-time", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one configuration may take")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "averaging-bound")
    args = parser.parse_args(argv)
    try:
        args.peer_counts = [int(v) for v in args.peers.split(",") if v]
        args.rate_list = [float(v) for v in args.rates.split(",") if v]
    except ValueError:
        parser.error("--peers takes integers, --rates numbers")
    if any(n < 2 for n in args.peer_counts) or any(r <= 0 for r in args.rate_list) or args.rounds < 1:
        parser.error("--peers >= 2, --rates > 0 and --rounds >= 1")
    benchmark_preflight(parser.error)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = int(args.size_mb * 1e6) if args.size_mb else model_bytes(args.model)
    size -= size % 4
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for rate in args.rate_list:
        for peers in args.peer_counts:
            print(f"[averaging-bound] {peers} peers at {rate:g} Mbit/s ...", flush=True)
            started = time.monotonic()
            run = run_collective(
                "hivemind",
                peers,
                rate,
                [size],
                args.rounds,
                args.out / f"p{peers}-{rate:g}mbit",
                timeout=args.timeout,
                matchmaking_time=args.matchmaking_time,
            )
            rounds = per_round(run["rows"])
            measured = median(r["allreduce_seconds"] for r in rounds)
            bound = bound_seconds(peers, size, rate)
            results.append(
                {
                    "peers": peers,
                    "rate_mbit": rate,
                    "size_bytes": size,
                    "matchmaking_seconds": median(r["matchmaking_seconds"] for r in rounds),
                    "allreduce_seconds": measured,
                    "bound_seconds": bound,
                    "ratio": measured / bound,
                    "rounds": rounds,
                    "max_error": max((r["max_error"] or 0.0) for r in run["rows"]),
                    "qdiscs": run["qdiscs"],
                }
            )
            print(f"[averaging-bound] {peers} peers at {rate:g} Mbit/s: {time.monotonic() - started:.0f} s")
    (args.out / "averaging_bound.json").write_text(
        json.dumps(
            {"model": args.model, "size_bytes": size, "machine_cores": os.cpu_count(), "results": results},
            indent=2,
        )
        + "\n"
    )
    print(
        f"\nstate: {size / 1e6:.1f} MB float32 ({args.size_mb and 'by --size-mb' or args.model}); "
        f"{args.rounds} rounds after a warm-up; machine: {os.cpu_count()} cores"
    )
    print(
        f"{'peers':>5} {'Mbit/s':>7} {'match s':>8} {'allreduce s':>11} {'bound s':>8} {'ratio':>6} "
        f"{'Mbit/s got':>10}"
    )
    for row in results:
        achieved = bound_seconds(row["peers"], size, 1) / row["allreduce_seconds"]
        print(
            f"{row['peers']:>5} {row['rate_mbit']:>7g} {row['matchmaking_seconds']:>8.2f} "
            f"{row['allreduce_seconds']:>11.2f} {row['bound_seconds']:>8.2f} {row['ratio']:>6.2f} "
            f"{achieved:>10.1f}"
        )
    print(
        "allreduce: the slowest peer's, median over rounds; bound: 2(n-1)/n * M / B; ratio: allreduce / "
        "bound (goal <= 1.5 at 1000 Mbit/s for 2 and 4 peers); Mbit/s got: the rate at which the bound "
        "would be the measured time; matchmaking is apart"
    )
    bad = [r for r in results if r["max_error"] > 1e-3]
    if bad:
        print(
            f"WRONG RESULT: the averaged tensor differs from the exact average in {len(bad)} configurations"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
