"""All-reduce among peers on shaped links: Hivemind's butterfly all-reduce, torch.distributed gloo and
OpenMPI's algorithms (allreduce_mpi.py).

``run_collective`` (for the benchmarks averaging_bound.py and allreduce_micro.py) starts one worker process
per peer, each in its own network namespace of a :class:`ShapedNamespaces` (shaped_netns.py), and returns
every worker's timings. A worker (``python allreduce_peers.py worker ...``) all-reduces a float32 tensor of
each size ``--rounds`` times after one warm-up round and writes one JSON line per round:

- ``hivemind``: a ``DecentralizedAverager`` per size (target group size = the peers; no compression, as
  ``hivemind.Optimizer`` averages by default) over a DHT the first peer starts. A round is scheduled with
  ``require_trigger``: ``matchmaking_seconds`` runs until the group formed, ``allreduce_seconds`` from the
  trigger to the averaged result, so the two are apart;
- ``gloo``: ``torch.distributed.all_reduce`` (the gloo backend's own algorithm for CPU tensors; PyTorch
  offers no choice of it) after a barrier; ``matchmaking_seconds`` is 0 (the process group is fixed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import allreduce_mpi  # noqa: E402
from benchmarks.shaped_netns import ShapedNamespaces  # noqa: E402

TORCH_IMPLEMENTATIONS = ("hivemind", "gloo")  # this file's workers; the MPI ones are allreduce_mpi.py's
IMPLEMENTATIONS = (*TORCH_IMPLEMENTATIONS, *allreduce_mpi.ALGORITHMS)
GLOO_PORT = 29517


def run_collective(
    impl: str,
    peers: int,
    rate_mbit: float | None,
    sizes: list[int],
    rounds: int,
    work_dir: Path,
    timeout: float = 900.0,
    matchmaking_time: float = 2.0,
) -> dict[str, Any]:
    """Run the workers; returns ``{"rows": [...], "qdiscs": [...], "logs": {...}}``, a row per round and peer.

    Raises RuntimeError (with the workers' log tails) when a worker failed or ran past ``timeout``.
    """
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl must be one of {IMPLEMENTATIONS} (got {impl!r})")
    work_dir.mkdir(parents=True, exist_ok=True)
    for stale in work_dir.glob("rank-*"):
        stale.unlink()
    if impl in allreduce_mpi.ALGORITHMS:
        with ShapedNamespaces(peers=peers, rate_mbit=rate_mbit) as net:
            status = allreduce_mpi.launch(impl, net, sizes, rounds, work_dir, timeout)
            qdiscs = net.qdiscs()
        return _results(impl, peers, work_dir, qdiscs, failed=[] if status == 0 else [0])
    with ShapedNamespaces(peers=peers, rate_mbit=rate_mbit) as net:
        processes = []
        for rank in range(peers):
            argv = [
                sys.executable, str(Path(__file__).resolve()), "worker", "--impl", impl,
                "--rank", str(rank), "--world", str(peers), "--address", net.address(rank),
                "--leader", net.address(0), "--sizes", ",".join(map(str, sizes)), "--rounds", str(rounds),
                "--matchmaking-time", str(matchmaking_time), "--dir", str(work_dir),
            ]  # fmt: skip
            env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0")
            log = (work_dir / f"rank-{rank}.log").open("w")
            processes.append(
                subprocess.Popen(net.command(rank, argv), env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                process.wait()
        qdiscs = net.qdiscs()
    return _results(
        impl, peers, work_dir, qdiscs, failed=[r for r, p in enumerate(processes) if p.returncode]
    )


def _results(impl: str, peers: int, work_dir: Path, qdiscs: list[str], failed: list[int]) -> dict[str, Any]:
    """The workers' rows, or RuntimeError with the failed ones' log tails (mpirun's output is rank 0's)."""
    logs = {f"rank-{r}": _tail(work_dir / f"rank-{r}.log") for r in range(peers)}
    if failed:
        details = "\n".join(f"--- rank {r}:\n{logs[f'rank-{r}']}" for r in failed)
        raise RuntimeError(f"{impl} workers {failed} failed or timed out ({peers} peers):\n{details}")
    rows = [
        json.loads(line)
        for rank in range(peers)
        for line in (work_dir / f"rank-{rank}.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return {"rows": rows, "qdiscs": qdiscs, "logs": logs}


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


# ------------------------------------------------------------------------------------------------ the worker


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    out = (args.dir / f"rank-{args.rank}.jsonl").open("w")
    run = hivemind_rounds if args.impl == "hivemind" else gloo_rounds
    for row in run(args):
        out.write(json.dumps(row) + "\n")
        out.flush()


def hivemind_rounds(args: argparse.Namespace):
    import hivemind
    import torch
    from hivemind.averaging.control import AveragingStage

    leader_file = args.dir / "leader.maddr"
    if args.rank == 0:
        dht = hivemind.DHT(host_maddrs=[f"/ip4/{args.address}/tcp/0"], start=True)
        leader_file.write_text(str(dht.get_visible_maddrs()[0]))
    else:
        dht = hivemind.DHT(
            host_maddrs=[f"/ip4/{args.address}/tcp/0"], initial_peers=[_wait_for(leader_file)], start=True
        )
    try:
        for size in args.sizes:
            tensor = torch.full((size // 4,), float(args.rank + 1))
            averager = hivemind.DecentralizedAverager(
                [tensor],
                dht,
                prefix=f"allreduce-{size}",
                target_group_size=args.world,
                min_group_size=args.world,
                min_matchmaking_time=args.matchmaking_time,
                request_timeout=min(1.0, args.matchmaking_time / 2),
                start=True,
            )
            try:
                for round_index in range(-1, args.rounds):  # round -1: warm-up, not written
                    control = averager.step(wait=False, require_trigger=True, timeout=120)
                    started = time.perf_counter()
                    while control.stage == AveragingStage.LOOKING_FOR_GROUP and not control.done():
                        time.sleep(0.001)
                    formed = time.perf_counter()
                    control.allow_allreduce()
                    control.result()
                    done = time.perf_counter()
                    if round_index >= 0:
                        with averager.get_tensors() as (averaged,):
                            expected = (args.world + 1) / 2
                            error = float((averaged - expected).abs().max()) if round_index == 0 else None
                        yield _row(args, size, round_index, formed - started, done - formed, error)
                    with averager.get_tensors() as (averaged,):
                        averaged.fill_(float(args.rank + 1))
            finally:
                averager.shutdown()
    finally:
        dht.shutdown()


def gloo_rounds(args: argparse.Namespace):
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://{args.leader}:{GLOO_PORT}", rank=args.rank, world_size=args.world
    )
    try:
        for size in args.sizes:
            for round_index in range(-1, args.rounds):
                tensor = torch.full((size // 4,), float(args.rank + 1))
                dist.barrier()
                started = time.perf_counter()
                dist.all_reduce(tensor)
                seconds = time.perf_counter() - started
                if round_index >= 0:
                    expected = args.world * (args.world + 1) / 2
                    error = float((tensor - expected).abs().max()) if round_index == 0 else None
                    yield _row(args, size, round_index, 0.0, seconds, error)
    finally:
        dist.destroy_process_group()


def _row(
    args, size: int, round_index: int, matchmaking: float, allreduce: float, error: float | None
) -> dict:
    return {
        "impl": args.impl,
        "rank": args.rank,
        "peers": args.world,
        "size_bytes": size // 4 * 4,
        "round": round_index,
        "matchmaking_seconds": round(matchmaking, 6),
        "allreduce_seconds": round(allreduce, 6),
        "max_error": error,  # first round only: the largest difference from the exact average/sum
    }


def _wait_for(path: Path, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.2)
    raise TimeoutError(f"no {path} after {timeout} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one all-reduce peer (run by run_collective)")
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("--impl", choices=TORCH_IMPLEMENTATIONS, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--leader", required=True)
    parser.add_argument("--sizes", required=True, help="bytes per tensor, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--matchmaking-time", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    args.sizes = [int(v) for v in args.sizes.split(",")]
    worker(args)


if __name__ == "__main__":
    main()
