"""The study's 16-vCPU configurations on one machine with at least 16 cores (docs/study-scale.md).

Every configuration runs ``trainer run`` itself (same loop, telemetry, start barrier and results files) as
plain processes, each pinned to its own disjoint block of cores (``os.sched_setaffinity`` before exec):

- ``base``: the baseline on all ``--total-vcpus`` cores;
- ``pN-lu{off,on}``: N Hivemind peers with total/N cores each, local updates off or on;
- ``pN-solo``: the reference for the peers' local throughput: N baseline processes on the same core blocks at
  the same time (the same loop and memory traffic, no Hivemind);
- ``pN-ddp`` / ``pN-diloco`` (``--strategies``): N DDP ranks, or N DiLoCo replicas syncing every
  ``--sync-every`` steps through a torchft Lighthouse this script starts, over loopback.

It prints, per configuration: samples/s (total and per peer), the mean step breakdown, averaging seconds per
round, speedup and efficiency against the baseline, and the peers' local throughput as a ratio to the solo
reference at the same cores (goal >= 0.90). Results go to ``--out`` as one experiment directory per
configuration (``experiment.json`` + one directory per peer) that ``trainer report`` reads; the solo
references sit in ``--out/_reference/``. Configurations already complete in ``--out`` are not run again, so a
long plan can be split over several calls (``--only``).

    python benchmarks/study_scale.py --out results/study-scale                 # 16 cores, the study's plan
    python benchmarks/study_scale.py --total-vcpus 2 --peers 2 --model smallcnn --steps 40   # CI size
    python benchmarks/study_scale.py --strategies ddp,diloco --peers 2,4,8 --sync-every 50   # DDP, DiLoCo
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bare_peers import start, stop_all, trainer_command, wait_all, wait_for_multiaddr  # noqa: E402
from benchmarks.process_census import Sampler, summarise  # noqa: E402
from controller.report.metrics import scaling_efficiency  # noqa: E402
from experiment.record import write_experiment  # noqa: E402
from experiment.results import read_rounds, read_summary  # noqa: E402
from trainer.calibrate import core_blocks  # noqa: E402


@dataclass(frozen=True)
class Configuration:
    name: str
    strategy: str  # baseline | hivemind | ddp | diloco
    peers: int
    cores_per_peer: int
    local_updates: bool = False
    reference: bool = False  # N concurrent baselines standing in for N peers without Hivemind

    @property
    def directory(self) -> str:
        return f"_reference/{self.name}" if self.reference else self.name


def plan(
    total: int,
    peer_counts: list[int],
    local_updates: list[bool],
    strategies: tuple[str, ...] = ("hivemind",),
    overlap: bool = False,
) -> list[Configuration]:
    """The configurations for ``total`` cores: each process on its own block of total/N cores, or with
    ``overlap`` every process on all of them with as many threads (the peers then share the cores, as the
    processes of one peer share its VM's).

    >>> [c.name for c in plan(16, [2, 4], [False, True])]
    ['base', 'p2-solo', 'p2-luoff', 'p2-luon', 'p4-solo', 'p4-luoff', 'p4-luon']
    >>> [c.name for c in plan(16, [2], [False], ("hivemind", "ddp", "diloco"))]
    ['base', 'p2-solo', 'p2-luoff', 'p2-ddp', 'p2-diloco']
    """
    configurations = [Configuration("base", "baseline", 1, total)]
    for peers in peer_counts:
        cores = total if overlap else total // peers
        configurations.append(Configuration(f"p{peers}-solo", "baseline", peers, cores, reference=True))
        if "hivemind" in strategies:
            for updates in local_updates:
                name = f"p{peers}-lu{'on' if updates else 'off'}"
                configurations.append(Configuration(name, "hivemind", peers, cores, local_updates=updates))
        for strategy in ("ddp", "diloco"):
            if strategy in strategies:
                configurations.append(Configuration(f"p{peers}-{strategy}", strategy, peers, cores))
    return configurations


def trainer_args(
    args: argparse.Namespace, config: Configuration, run_id: str, peer: str, out: Path
) -> list[str]:
    command = [
        *trainer_command(),
        "--strategy", config.strategy,
        "--model", args.model, "--dataset", args.dataset,
        "--batch-size", str(args.batch_size), "--learning-rate", str(args.learning_rate),
        "--max-steps", str(args.steps), "--vcpus", str(config.cores_per_peer),
        "--run-id", run_id, "--peer-id", peer, "--results-dir", str(out),
        "--metrics-port", "-1", "--overwrite",
    ]  # fmt: skip
    if config.strategy == "hivemind":
        command += [
            "--peers", str(config.peers), "--listen", "/ip4/127.0.0.1/tcp/0",
            "--target-batch-size", str(args.target_batch_size),
            "--local-updates" if config.local_updates else "--no-local-updates",
            "--matchmaking-time", str(args.matchmaking_time),
            "--average-state-every", str(args.average_state_every),
            "--averaging-timeout", str(args.averaging_timeout),
            "--finish-grace", str(args.finish_grace), "--start-timeout", "300",
        ]  # fmt: skip
    return command


def rank_args(
    args: argparse.Namespace, config: Configuration, rank: int, rendezvous: str, lighthouse: str
) -> list[str]:
    """A DDP rank's or DiLoCo replica's own flags."""
    command = [
        "--peers", str(config.peers), "--rank", str(rank), "--rendezvous", rendezvous,
        "--averaging-timeout", str(args.averaging_timeout), "--start-timeout", "300",
    ]  # fmt: skip
    if config.strategy == "diloco":
        command += ["--sync-every", str(args.sync_every), "--lighthouse", lighthouse]
    return command


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_lighthouse(log_path: Path, join_timeout: float) -> tuple[subprocess.Popen, str]:
    """torchft's Lighthouse on a free loopback port, from this Python's torchft (no console script needed: a
    script of its own, as the Lighthouse parses the process's arguments after the interpreter's first)."""
    address = f"127.0.0.1:{free_port()}"
    script = log_path.with_name("torchft_lighthouse.py")
    code = "import sys\nfrom torchft._torchft import lighthouse_main\nsys.exit(lighthouse_main())\n"
    script.write_text(code)
    command = [sys.executable, str(script), "--bind", address, "--min_replicas", "1"]
    command += ["--join_timeout_ms", str(int(join_timeout * 1000))]
    return start(command, log_path), address


def run_configuration(args: argparse.Namespace, config: Configuration, available: list[int]) -> bool:
    """Run one configuration into ``args.out/config.directory``; True when every process finished."""
    directory = args.out / config.directory
    directory.mkdir(parents=True, exist_ok=True)
    run_id = f"study-scale-{config.name}-{int(time.time())}"
    blocks = (
        [available[: config.cores_per_peer]] * config.peers
        if args.overlap
        else core_blocks(config.peers, config.cores_per_peer, available)
    )
    names = ["baseline"] if config.name == "base" else [f"peer-{i + 1:02d}" for i in range(config.peers)]
    processes: list[subprocess.Popen] = []
    started = time.time()
    bootstrap = ""
    rendezvous, lighthouse, helpers = f"127.0.0.1:{free_port()}", "", []
    sampler = Sampler({}, interval=args.census_interval).start()
    try:
        if config.strategy == "diloco":
            process, lighthouse = start_lighthouse(directory / "lighthouse.log", args.averaging_timeout)
            helpers.append(process)
        for index, (name, cores) in enumerate(zip(names, blocks, strict=True)):
            peer_dir = directory / name
            command = trainer_args(args, config, run_id, name, peer_dir)
            if config.strategy in ("ddp", "diloco"):
                command += rank_args(args, config, index, rendezvous, lighthouse)
            if config.strategy == "hivemind" and index > 0:
                command += ["--initial-peers", bootstrap]
            processes.append(start(command, directory / f"{name}.log", cores, wait_policy=args.policy_env))
            sampler.sessions[name] = processes[-1].pid  # each process leads its own session
            if config.strategy == "hivemind" and index == 0:
                bootstrap = wait_for_multiaddr(peer_dir / "multiaddrs.txt", processes[0])
        wait_all(processes, args.timeout)
    finally:
        samples = sampler.stop()
        stop_all(processes + helpers)
    (directory / "processes.json").write_text(json.dumps(summarise(samples), indent=2) + "\n")
    complete = all(p.returncode == 0 for p in processes) and all(
        (read_summary(directory / n) or {}).get("complete") for n in names
    )
    write_experiment(directory, **experiment_document(args, config, run_id, blocks, complete, started))
    return complete


def experiment_document(
    args: argparse.Namespace,
    config: Configuration,
    run_id: str,
    blocks: list[list[int]],
    complete: bool,
    started: float,
) -> dict[str, Any]:
    """experiment.json's fields (experiment/record.py), with the placement this benchmark chose."""
    settings = {
        "strategy": config.strategy,
        "peers": config.peers,
        "vcpus": config.cores_per_peer,
        "model": args.model,
        "dataset": args.dataset,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "optimizer": "sgd",
        "max_steps": args.steps,
        "omp_wait_policy": args.omp_wait_policy,
        "placement": "overlap" if args.overlap else "blocks",
    }
    if config.strategy == "hivemind":
        settings.update(
            target_batch_size=args.target_batch_size,
            local_updates=config.local_updates,
            average_state_every=args.average_state_every,
        )
    if config.strategy == "diloco":
        settings.update(sync_every=args.sync_every)
    return {
        "experiment_id": config.name,
        "run_id": run_id,
        "strategy": config.strategy,
        "peers": config.peers,
        "settings": settings,
        "placement": {
            "method": "os.sched_setaffinity: "
            + ("every process on the same cores" if args.overlap else "one disjoint core block per process"),
            "cores": blocks,
        },
        "machine": {"cores": os.cpu_count(), "reference": config.reference},
        "started": started,
        "finished": time.time(),
        "complete": complete,
    }


# ------------------------------------------------------------------------------------------------ the table


def measure(directory: Path) -> dict[str, Any] | None:
    """Per-configuration figures from its peers' summary.json and rounds.csv."""
    summaries = [
        s for p in sorted(directory.iterdir()) if p.is_dir() and (s := read_summary(p)) and s.get("steps")
    ]
    if not summaries:
        return None
    rounds = [r for p in sorted(directory.iterdir()) if p.is_dir() for r in read_rounds(p)]
    ok_rounds = [r for r in rounds if r.get("outcome") == "ok" and r.get("allreduce_seconds") is not None]
    per_peer = [s["samples_per_second"] for s in summaries]

    def mean_component(name: str) -> float:
        return sum(s["components"][name]["mean"] for s in summaries) / len(summaries)

    return {
        "peers": len(summaries),
        "total": sum(per_peer),
        "per_peer": sum(per_peer) / len(per_peer),
        "per_peer_min": min(per_peer),
        "step": mean_component("step_seconds"),
        "data": mean_component("data_seconds"),
        "compute": mean_component("compute_seconds"),
        "averaging": mean_component("averaging_seconds"),
        "rounds_ok": sum(int(s.get("rounds_ok") or 0) for s in summaries),
        "rounds_failed": sum(int(s.get("rounds_failed") or 0) for s in summaries),
        "allreduce": (sum(r["allreduce_seconds"] for r in ok_rounds) / len(ok_rounds)) if ok_rounds else None,
        "cpu_seconds": sum((s.get("cpu_received") or {}).get("process_tree_seconds") or 0 for s in summaries),
    }


def recorded_differences(args: argparse.Namespace, config: Configuration) -> list[str]:
    """What the configuration's experiment.json records that this call would not run (another call's
    steps, model, batch size...): "max_steps 100 (this call 200)"; empty where they agree."""
    try:
        recorded = json.loads((args.out / config.directory / "experiment.json").read_text())["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return ["no experiment.json"]
    wanted = experiment_document(args, config, "", [], False, 0.0)["settings"]
    return [
        f"{key} {recorded.get(key)} (this call {value})"
        for key, value in wanted.items()
        if recorded.get(key) != value
    ]


def table(args: argparse.Namespace, configurations: list[Configuration]) -> list[str]:
    """The figures of every configuration present under --out; one recorded with other settings than this
    call's (an earlier call with other steps, model...) is listed apart and enters no S, E or local."""
    present = [c for c in configurations if (args.out / c.directory).is_dir()]
    others = {c.name: differences for c in present if (differences := recorded_differences(args, c))}
    figures = {c.name: measure(args.out / c.directory) for c in present if c.name not in others}
    base = figures.get("base")
    header = (
        f"{'config':<10} {'peers':>5} {'cores':>5} {'total/s':>8} {'peer/s':>7} {'step s':>7} {'data s':>7} "
        f"{'comp s':>7} {'avg s':>7} {'rounds':>7} {'AR s':>6} {'S':>5} {'E':>6} {'local':>6} {'comp':>5}"
    )
    lines = [header]
    lines += [f"{name:<10} not in the table: recorded with {'; '.join(why)}" for name, why in others.items()]
    for config in configurations:
        row = figures.get(config.name)
        if row is None:
            continue
        solo = figures.get(f"p{config.peers}-solo") if config.strategy != "baseline" else None
        speedup = row["total"] / base["total"] if base and not config.reference else None
        local = row["per_peer"] / solo["per_peer"] if solo else None
        compute_ratio = solo["compute"] / row["compute"] if solo else None
        efficiency = scaling_efficiency(speedup, config.peers * config.cores_per_peer, args.total_vcpus)
        lines.append(
            f"{config.name:<10} {row['peers']:>5} {config.cores_per_peer:>5} {row['total']:>8.1f} "
            f"{row['per_peer']:>7.1f} {row['step']:>7.3f} {row['data']:>7.3f} {row['compute']:>7.3f} "
            f"{row['averaging']:>7.3f} {row['rounds_ok']:>3}/{row['rounds_failed']:<3} "
            f"{_fmt(row['allreduce'], 6, 2)} {_fmt(speedup, 5, 2)} "
            f"{_fmt(efficiency, 6, 2)} "
            f"{_fmt(local, 6, 2)} "
            f"{_fmt(compute_ratio, 5, 2)}"
        )
    return lines


def hivemind_compute_rows(
    args: argparse.Namespace, configurations: list[Configuration]
) -> list[dict[str, Any]]:
    """A calibration's ``hivemind_compute`` rows (controller/calibration.py) from this call's pN-luoff and
    pN-solo: the solo's compute seconds over the peers' at the same cores, peers on disjoint blocks."""
    rows = []
    for config in configurations:
        solo_config = next((c for c in configurations if c.name == f"p{config.peers}-solo"), None)
        if config.strategy != "hivemind" or config.local_updates or solo_config is None or args.overlap:
            continue
        if recorded_differences(args, config) or recorded_differences(args, solo_config):
            continue
        peer, solo = (
            measure(d) if (d := args.out / c.directory).is_dir() else None for c in (config, solo_config)
        )
        if not peer or not solo or not peer["compute"]:
            continue
        rows.append(
            {
                "model": args.model,
                "batch_size": args.batch_size,
                "threads": config.cores_per_peer,
                "compute_ratio": round(solo["compute"] / peer["compute"], 4),
                "peers": config.peers,
                "settings": {
                    "target_batch_size": args.target_batch_size,
                    "matchmaking_time": args.matchmaking_time,
                    "average_state_every": args.average_state_every,
                    "omp_wait_policy": args.omp_wait_policy,
                    "steps": args.steps,
                },
            }
        )
    return rows


def write_calibration(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    """--calibration-in with its Hivemind rows replaced by ``rows`` (same model, batch size and threads),
    written to --calibration-out; returns what was done, in a line."""
    from controller.calibration import load

    document = json.loads(args.calibration_in.read_text())
    load(args.calibration_in)  # one clear error for a file that is not a calibration
    keys = {(r["model"], r["batch_size"], r["threads"]) for r in rows}
    kept = [
        r
        for r in document.get("hivemind_compute", [])
        if (r["model"], r["batch_size"], r["threads"]) not in keys
    ]
    document["hivemind_compute"] = sorted(
        kept + rows, key=lambda r: (r["model"], r["batch_size"], r["threads"])
    )
    args.calibration_out.write_text(json.dumps(document, indent=1) + "\n")
    load(args.calibration_out)
    threads = ", ".join(f"{r['threads']}: {r['compute_ratio']:.2f}" for r in rows) or "none measured"
    return f"{args.calibration_out}: Hivemind compute ratios by threads ({threads})"


def census_table(args: argparse.Namespace, configurations: list[Configuration]) -> list[str]:
    """Per configuration and kind of process, summed over the peers: processes, threads (most seen), cores
    used over the sampled window and the thread settings it inherited (processes.json)."""
    lines = [f"{'config':<10} {'process':<16} {'count':>5} {'threads':>7} {'cores':>6}  environment"]
    for config in configurations:
        try:
            peers = json.loads((args.out / config.directory / "processes.json").read_text())
        except (OSError, ValueError):
            continue
        kinds: dict[str, dict[str, Any]] = {}
        for per_kind in peers.values():
            for name, row in per_kind.items():
                empty = {"processes": 0, "threads": 0, "cores": 0.0, "environment": {}}
                total = kinds.setdefault(name, empty)
                for field in ("processes", "threads", "cores"):
                    total[field] += row[field]
                total["environment"] = row["environment"]
        for name, row in sorted(kinds.items()):
            settings = " ".join(f"{k}={v}" for k, v in sorted(row["environment"].items()))
            lines.append(
                f"{config.name:<10} {name:<16} {row['processes']:>5} {row['threads']:>7} "
                f"{row['cores']:>6.2f}  {settings}"
            )
    return lines


def _fmt(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-vcpus", type=int, default=16, help="cores of the study's VM budget (16)")
    parser.add_argument("--peers", default="2,4,8,16", help="peer counts, comma-separated")
    parser.add_argument("--local-updates", default="off,on", help="off, on or off,on")
    parser.add_argument(
        "--strategies", default="hivemind", help="of hivemind, ddp, diloco, comma-separated (with the solos)"
    )
    parser.add_argument("--sync-every", type=int, default=50, help="DiLoCo: inner steps between syncs")
    parser.add_argument("--steps", type=int, default=200, help="local steps per process")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--target-batch-size", type=int, default=1250)
    parser.add_argument("--matchmaking-time", type=float, default=3.0)
    parser.add_argument(
        "--average-state-every",
        type=int,
        default=1,
        help="Hivemind: average parameters every N epochs (1, Hivemind's default: in the background)",
    )
    parser.add_argument(
        "--omp-wait-policy",
        choices=("passive", "active", "unset"),
        default="passive",
        help="how idle OpenMP threads wait: passive (sleep, the trainer unit's setting), active (spin), "
        "unset (GNU OpenMP's default: spin a while, then sleep)",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="every process on all --total-vcpus cores with as many threads (default: disjoint blocks)",
    )
    parser.add_argument(
        "--calibration-out",
        type=Path,
        help="write --calibration-in with the measured pN-luoff/pN-solo compute ratios (hivemind_compute)",
    )
    parser.add_argument(
        "--calibration-in", type=Path, default=REPO / "controller" / "calibrations" / "default.json"
    )
    parser.add_argument("--census-interval", type=float, default=3.0, help="seconds between process censuses")
    parser.add_argument("--averaging-timeout", type=float, default=60.0)
    parser.add_argument("--finish-grace", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one configuration may take")
    parser.add_argument("--only", default="", help="comma-separated configuration names (default: all)")
    parser.add_argument("--table-only", action="store_true", help="print the table of what --out holds")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "study-scale")
    args = parser.parse_args(argv)
    try:
        args.peer_counts = [int(v) for v in args.peers.split(",") if v]
        args.updates = [{"off": False, "on": True}[v] for v in args.local_updates.split(",") if v]
    except (ValueError, KeyError):
        parser.error("--peers takes integers, --local-updates off and/or on")
    args.policy_env = "" if args.omp_wait_policy == "unset" else args.omp_wait_policy.upper()
    args.strategy_names = tuple(filter(None, args.strategies.split(",")))
    unknown = set(args.strategy_names) - {"hivemind", "ddp", "diloco"}
    if unknown or not args.strategy_names:
        parser.error(f"--strategies takes hivemind, ddp and/or diloco (got {args.strategies!r})")
    available = sorted(os.sched_getaffinity(0))
    if args.total_vcpus > len(available) and not args.table_only:
        parser.error(f"--total-vcpus {args.total_vcpus}: this process may use only {len(available)} cores")
    bad = [n for n in args.peer_counts if n < 1 or args.total_vcpus % n]
    if bad:
        parser.error(f"peer counts must divide --total-vcpus {args.total_vcpus} (got {bad})")
    args.available = available[: args.total_vcpus]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configurations = plan(args.total_vcpus, args.peer_counts, args.updates, args.strategy_names, args.overlap)
    wanted = set(filter(None, args.only.split(",")))
    failed = []
    for config in [] if args.table_only else configurations:
        if wanted and config.name not in wanted:
            continue
        done = args.out / config.directory / "experiment.json"
        if done.exists() and json.loads(done.read_text()).get("complete"):
            print(f"[study-scale] {config.name}: complete in {args.out}, kept", flush=True)
            continue
        started = time.monotonic()
        print(f"[study-scale] {config.name}: {config.peers} x {config.cores_per_peer} cores ...", flush=True)
        if not run_configuration(args, config, args.available):
            failed.append(config.name)
        print(f"[study-scale] {config.name}: {time.monotonic() - started:.0f} s", flush=True)
    print(
        f"\nmachine: {os.cpu_count()} cores; {args.model}, {args.dataset}, batch {args.batch_size}, "
        f"lr {args.learning_rate}, TBS {args.target_batch_size}, {args.steps} steps per process, "
        f"parameters averaged every {args.average_state_every} epochs; DiLoCo syncs every {args.sync_every} "
        f"steps; OpenMP wait policy {args.omp_wait_policy}; "
        + ("every process on all the cores" if args.overlap else "each process on its own cores")
    )
    print("\n".join(table(args, configurations)))
    if args.calibration_out:
        print(write_calibration(args, hivemind_compute_rows(args, configurations)))
    print("\nprocesses (all peers of a configuration; cores: CPU seconds / wall seconds while sampled):")
    print("\n".join(census_table(args, configurations)))
    print(
        "S: total samples/s over the baseline's on all cores; E: scaling efficiency, S per vCPU against the "
        "baseline's (the peers share its cores: E = S, 1.0 the ceiling without communication); local: a "
        "peer's samples/s over the solo reference's at the same cores (goal >= 0.90); comp: solo compute s / "
        "peer compute s"
    )
    if failed:
        print(f"INCOMPLETE: {', '.join(failed)} (see the .log files in {args.out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
