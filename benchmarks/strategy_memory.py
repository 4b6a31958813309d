"""Memory per peer of the data-parallel strategies as the ranks grow: DDP keeps
everything on every rank, ZeRO stage 1 (``zero``, ``deepspeed-z1``) shards the optimizer state, stage 2
(``deepspeed-z2``) the gradients too, stage 3 (``fsdp``, ``deepspeed-z3``) the parameters too. Measured, not
computed: each rank is a ``trainer run`` process (gloo on 127.0.0.1), and its ``summary.json`` → ``memory``
reports the parameter, gradient and optimizer-state bytes it holds and its peak RSS.

    python benchmarks/strategy_memory.py --model resnet18 --optimizer adam --ranks 2,4 --out results/memory

Prints one row per strategy and rank count: optimizer state per rank (smallest, largest), its sum over the
ranks, the largest rank's share of DDP's per-rank state at the same rank count, and the largest rank's
parameters, gradients and peak RSS. The results directories
are ordinary experiment results (`trainer report OUT` puts them side by side).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bare_peers import free_port, start, stop_all, trainer_command, wait_all  # noqa: E402
from experiment.results import read_summary  # noqa: E402

STRATEGIES = ("ddp", "zero", "fsdp", "deepspeed-z1", "deepspeed-z2", "deepspeed-z3")


def strategy_flags(strategy: str) -> list[str]:
    """``deepspeed-zN`` → the deepspeed strategy at stage N; the others are strategies of their own.

    >>> strategy_flags("deepspeed-z3"), strategy_flags("fsdp")
    (['--strategy', 'deepspeed', '--zero-stage', '3'], ['--strategy', 'fsdp'])
    """
    name, _, stage = strategy.partition("-z")
    return ["--strategy", name, *(["--zero-stage", stage] if stage else [])]


def run_ranks(args: argparse.Namespace, strategy: str, world: int) -> list[dict[str, Any]] | None:
    """One run of ``world`` ranks; each rank's summary ``memory``, or None when a rank failed."""
    directory = args.out / f"{strategy}-{args.model}-r{world}"
    port = free_port()
    processes = []
    for rank in range(world):
        peer = f"peer-{rank + 1:02d}"
        command = trainer_command(
            *strategy_flags(strategy), "--model", args.model, "--dataset", "synthetic",
            "--optimizer", args.optimizer, "--batch-size", str(args.batch_size), "--learning-rate", "0.001",
            "--max-steps", str(args.steps), "--vcpus", "1", "--metrics-port", "-1", "--overwrite",
            "--peers", str(world), "--rank", str(rank), "--rendezvous", f"127.0.0.1:{port}",
            "--run-id", directory.name, "--peer-id", peer, "--results-dir", str(directory / peer),
        )  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
        processes.append(start(command, directory / f"{peer}.log"))
    try:
        if not wait_all(processes, args.timeout):
            print(f"[strategy-memory] {directory.name}: not done in {args.timeout} s", file=sys.stderr)
            return None
    finally:
        stop_all(processes)
    if any(p.returncode != 0 for p in processes):
        print(f"[strategy-memory] {directory.name}: a rank failed, see {directory}/*.log", file=sys.stderr)
        return None
    return [read_summary(directory / f"peer-{rank + 1:02d}")["memory"] for rank in range(world)]


def table(measured: dict[tuple[str, int], list[dict[str, Any]]]) -> list[str]:
    """Markdown rows: per strategy and ranks, optimizer state per rank (MB), its sum and share of DDP's."""
    lines = [
        "| strategy | ranks | optimizer state per rank MB (min–max) | sum over ranks MB | largest / DDP's "
        "| parameters MB (max) | gradients MB (max) | peak RSS per rank MB (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (strategy, world), memory in sorted(measured.items(), key=lambda item: (item[0][1], item[0][0])):
        state = [m["optimizer_state_bytes"] for m in memory]
        ddp = measured.get(("ddp", world))
        share = max(state) / max(m["optimizer_state_bytes"] for m in ddp) if ddp else None
        low, high, summed = min(state) / 1e6, max(state) / 1e6, sum(state) / 1e6
        lines.append(
            f"| {strategy} | {world} | {low:.1f}–{high:.1f} | {summed:.1f} "
            f"| {'–' if share is None else f'{share:.2f}'} "
            f"| {max(m['parameter_bytes'] for m in memory) / 1e6:.1f} "
            f"| {max(m['gradient_bytes'] for m in memory) / 1e6:.1f} "
            f"| {max(m['peak_rss_bytes'] for m in memory) / 1e6:.0f} |"
        )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    parser.add_argument("--ranks", default="2,4", help="rank counts, comma-separated")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--steps", type=int, default=4, help="steps per rank (the state exists after the first)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=Path("results/strategy-memory"))
    args = parser.parse_args(argv)
    args.ranks = [int(n) for n in args.ranks.split(",")]
    args.strategies = args.strategies.split(",")
    if any(n < 1 for n in args.ranks) or not set(args.strategies) <= set(STRATEGIES):
        parser.error(f"--ranks must be positive and --strategies among {', '.join(STRATEGIES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    measured = {}
    for world in args.ranks:
        for strategy in args.strategies:
            memory = run_ranks(args, strategy, world)
            if memory is None:
                return 1
            measured[strategy, world] = memory
            print(f"[strategy-memory] {strategy} × {world}: done", file=sys.stderr)
    print(f"{args.model}, {args.optimizer}, batch {args.batch_size}, {args.steps} steps per rank:")
    print("\n".join(table(measured)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
