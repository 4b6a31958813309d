"""Failed averaging rounds over many short multi-peer runs, by phase and cause.

One repetition is the 3-peer start-barrier scenario: Hivemind peers as bare ``trainer run`` processes on
loopback (smallcnn, synthetic data, batch 32, target batch size 256, 120 steps, matchmaking 2 s), started
``--stagger`` seconds apart so the start barrier holds the early ones. After N repetitions it prints, per
run, the epochs, rounds ok and failed, the failed ones per phase (first epoch, middle, last two epochs
before the stop, past it) and per cause (rounds.csv ``cause``), then the totals. ``--cluster`` adds one run
of the same settings on the local cluster (``playbooks/experiment.yml``; its peers start together). Every
run's results stay in ``--out`` (one directory per run, readable by ``trainer report``) with ``soak.json``,
the table's figures; complete runs already there are kept, so a long soak can be split over several calls.

    python benchmarks/round_soak.py --repetitions 20 --out results/round-soak
    python benchmarks/round_soak.py --repetitions 1 --peers 2 --steps 30 --stagger 3    # CI size
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bare_peers import start, stop_all, trainer_command, wait_all, wait_for_multiaddr  # noqa: E402
from experiment.results import COMPLETE_EXIT_REASONS, ROUND_CAUSES, read_rounds, read_summary  # noqa: E402

PHASES = ("first", "middle", "last2", "past")


def phase(epoch: int, stop_epoch: int) -> str:
    """The phase of a round at ``epoch`` (the epoch it would end) in a run that stopped at ``stop_epoch``:
    the first epoch, the middle, the last two epochs, or past the stop (a peer that missed the stop).

    >>> [phase(e, 6) for e in range(7)]
    ['first', 'middle', 'middle', 'middle', 'last2', 'last2', 'past']
    >>> [phase(e, 2) for e in range(2)]
    ['first', 'last2']
    """
    if epoch >= stop_epoch > 0:
        return "past"
    if epoch <= 0:
        return "first"
    return "last2" if epoch >= stop_epoch - 2 else "middle"


def figures(run_dir: Path) -> dict[str, Any] | None:
    """A run's figures from its peers' summary.json and rounds.csv (None when no peer wrote a summary)."""
    peers = {p.name: s for p in sorted(run_dir.iterdir()) if p.is_dir() and (s := read_summary(p))}
    if not peers:
        return None
    details = [s.get("strategy_details") or {} for s in peers.values()]
    stop_epoch = max(int(d.get("stop_epoch") or d.get("hivemind_epoch") or 0) for d in details)
    rounds = [r for name in peers for r in read_rounds(run_dir / name)]
    failed = [r for r in rounds if r.get("outcome") != "ok"]
    by_phase = Counter(phase(int(r.get("epoch") or 0), stop_epoch) for r in failed)
    by_cause = Counter(r.get("cause") or "other" for r in failed)
    return {
        "run": run_dir.name,
        "peers": len(peers),
        "complete": sum(s.get("exit_reason") in COMPLETE_EXIT_REASONS for s in peers.values()),
        "stop_epoch": stop_epoch,
        "rounds_ok": len(rounds) - len(failed),
        "rounds_failed": len(failed),
        "by_phase": {name: by_phase.get(name, 0) for name in PHASES},
        "by_cause": {name: by_cause.get(name, 0) for name in ROUND_CAUSES},
        "failed": [
            {key: r.get(key) for key in ("epoch", "kind", "outcome", "cause", "error")} | {"peer": peer}
            for peer in peers
            for r in read_rounds(run_dir / peer)
            if r.get("outcome") != "ok"
        ],
        "samples_per_second": {name: s.get("samples_per_second") for name, s in peers.items()},
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    causes = "  ".join(f"{c:>{max(5, len(c))}}" for c in ROUND_CAUSES)
    lines = [
        f"{'run':<14} {'peers':>5} {'done':>4} {'epochs':>6} {'ok':>4} {'failed':>6} "
        f"{'first':>5} {'middle':>6} {'last2':>5} {'past':>4}  {causes}"
    ]
    for row in [*rows, _totals(rows)] if rows else []:
        counts = "  ".join(f"{row['by_cause'][c]:>{max(5, len(c))}}" for c in ROUND_CAUSES)
        lines.append(
            f"{row['run']:<14} {row['peers']:>5} {row['complete']:>4} {row['stop_epoch']:>6} "
            f"{row['rounds_ok']:>4} {row['rounds_failed']:>6} {row['by_phase']['first']:>5} "
            f"{row['by_phase']['middle']:>6} {row['by_phase']['last2']:>5} {row['by_phase']['past']:>4}  "
            f"{counts}"
        )
    return lines


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(row[key] for row in rows)

    return {
        "run": f"all ({len(rows)} runs)",
        **{key: total(key) for key in ("peers", "complete", "stop_epoch", "rounds_ok", "rounds_failed")},
        "by_phase": {name: sum(row["by_phase"][name] for row in rows) for name in PHASES},
        "by_cause": {name: sum(row["by_cause"][name] for row in rows) for name in ROUND_CAUSES},
    }


# ------------------------------------------------------------------------------------------------ the runs


def peer_args(args: argparse.Namespace, run_id: str, name: str, results: Path) -> list[str]:
    return trainer_command(
        "--strategy", "hivemind", "--model", args.model, "--dataset", "synthetic",
        "--batch-size", str(args.batch_size), "--learning-rate", "0.05",
        "--target-batch-size", str(args.target_batch_size), "--max-steps", str(args.steps),
        "--matchmaking-time", str(args.matchmaking_time), "--averaging-timeout", str(args.averaging_timeout),
        "--peers", str(args.peers), "--vcpus", "1", "--metrics-port", "-1",
        "--listen", "/ip4/127.0.0.1/tcp/0", "--run-id", run_id, "--peer-id", name,
        "--results-dir", str(results), "--overwrite",
    )  # fmt: skip


def run_bare(args: argparse.Namespace, run_dir: Path) -> None:
    """One repetition: the bootstrap peer, then the others ``--stagger`` seconds apart."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"round-soak-{run_dir.name}-{int(time.time())}"
    processes: list[subprocess.Popen] = []
    try:
        address = ""
        for index in range(args.peers):
            name = f"peer-{index + 1:02d}"
            command = peer_args(args, run_id, name, run_dir / name)
            if index:
                time.sleep(args.stagger)
                command += ["--initial-peers", address]
            processes.append(start(command, run_dir / f"{name}.log"))
            if index == 0:
                address = wait_for_multiaddr(run_dir / name / "multiaddrs.txt", processes[0])
        if not wait_all(processes, args.timeout):
            print(
                f"[round-soak] {run_dir.name}: still running after {args.timeout:.0f} s, stopped", flush=True
            )
    finally:
        stop_all(processes)


def run_cluster(args: argparse.Namespace, run_dir: Path) -> None:
    """The same settings on the local cluster; its results directory becomes ``run_dir``."""
    experiment_id = run_dir.name
    command = [
        "ansible-playbook", "playbooks/experiment.yml",
        "-e", f"peers={args.peers}", "-e", f"model={args.model}", "-e", "dataset=synthetic",
        "-e", f"batch_size={args.batch_size}", "-e", f"target_batch_size={args.target_batch_size}",
        "-e", f"max_steps={args.steps}", "-e", f"matchmaking_time={args.matchmaking_time}",
        "-e", f"averaging_timeout={args.averaging_timeout}", "-e", f"experiment_id={experiment_id}",
        "-e", f"results_root={run_dir.parent.resolve()}",
    ]  # fmt: skip
    log = run_dir.parent / f"{experiment_id}.log"
    with log.open("w") as output:
        code = subprocess.run(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT).returncode
    if code:
        print(f"[round-soak] {experiment_id}: ansible-playbook exited {code} (see {log})", flush=True)


def complete(run_dir: Path, peers: int) -> bool:
    row = figures(run_dir) if run_dir.is_dir() else None
    return row is not None and row["peers"] == peers and row["complete"] == peers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--peers", type=int, default=3)
    parser.add_argument("--stagger", type=float, default=15.0, help="seconds between the peers' starts")
    parser.add_argument("--steps", type=int, default=120, help="max steps per peer")
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--target-batch-size", type=int, default=256)
    parser.add_argument("--matchmaking-time", type=float, default=2.0)
    parser.add_argument("--averaging-timeout", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    parser.add_argument("--cluster", action="store_true", help="one more run on the local cluster")
    parser.add_argument("--table-only", action="store_true", help="print the table of what --out holds")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "round-soak")
    args = parser.parse_args(argv)
    if args.repetitions < 0 or args.peers < 2 or args.steps < 1 or args.stagger < 0:
        parser.error("--repetitions >= 0, --peers >= 2, --steps >= 1 and --stagger >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [args.out / f"run-{index + 1:02d}" for index in range(args.repetitions)]
    if args.cluster:
        runs.append(args.out / "cluster")
    for run_dir in [] if args.table_only else runs:
        if complete(run_dir, args.peers):
            print(f"[round-soak] {run_dir.name}: complete in {args.out}, kept", flush=True)
            continue
        started = time.monotonic()
        (run_cluster if run_dir.name == "cluster" else run_bare)(args, run_dir)
        print(f"[round-soak] {run_dir.name}: {time.monotonic() - started:.0f} s", flush=True)
    rows = [row for run_dir in runs if run_dir.is_dir() and (row := figures(run_dir))]
    (args.out / "soak.json").write_text(
        json.dumps({"settings": vars_of(args), "runs": rows}, indent=2) + "\n"
    )
    print(
        f"\n{args.peers} peers, {args.model}, batch {args.batch_size}, TBS {args.target_batch_size}, "
        f"{args.steps} steps, matchmaking {args.matchmaking_time} s, started {args.stagger} s apart; "
        f"machine: {os.cpu_count()} cores"
    )
    print("\n".join(table(rows)))
    print(
        "done: peers that finished complete; epochs: the stop epoch (in the total: their sum); ok/failed: "
        "rounds.csv rows of every peer; first/middle/last2/past: failed rounds in the first epoch, between, "
        "in the last two epochs, past the stop epoch; "
        "then failed rounds per cause (docs/hivemind-behaviour.md)"
    )
    incomplete = [row["run"] for row in rows if row["complete"] < args.peers]
    missing = [r.name for r in runs if not any(row["run"] == r.name for row in rows)]
    if incomplete or missing:
        print(f"INCOMPLETE: {', '.join(incomplete + missing)} (see the .log files in {args.out})")
    return 1 if incomplete or missing else 0


def vars_of(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


if __name__ == "__main__":
    sys.exit(main())
