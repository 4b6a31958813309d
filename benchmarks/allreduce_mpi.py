"""All-reduce over MPI among peers on shaped links: OpenMPI's ring, recursive doubling, Rabenseifner and a
reduce + broadcast over binomial trees, for benchmarks/allreduce_micro.py beside Hivemind and gloo.

The peers are the network namespaces of a :class:`ShapedNamespaces` (shaped_netns.py). ``mpirun`` runs in
the host's namespace (it reaches the peers over their bridge) and starts one ``orted`` per peer through a
launch agent that enters that peer's namespace instead of logging in with ssh; each orted starts one worker
(``/usr/bin/python3 allreduce_mpi.py worker ...``, Debian's mpi4py and NumPy). The peers talk TCP only
(``btl tcp,self``: they share the host's name, and OpenMPI's shared memory would bypass the shaped links).
The algorithm is OpenMPI's tuned collective, locked down with its dynamic rules (``ALGORITHMS``).

A worker all-reduces a float32 vector of each size ``--rounds`` times after one warm-up round and writes one
JSON line per round, as allreduce_peers.py's workers do. Needs openmpi-bin, python3-mpi4py and
python3-numpy (apt).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# each implementation: OpenMPI's tuned-collective parameters that select it (``ompi_info --param coll tuned
# --level 9`` lists the numbers)
ALGORITHMS: dict[str, dict[str, int]] = {
    "mpi-ring": {"allreduce": 4},
    "mpi-recursive-doubling": {"allreduce": 3},
    "mpi-rabenseifner": {"allreduce": 6},
    # "nonoverlapping": a reduce to rank 0, then a broadcast from it, both over binomial trees
    "mpi-tree": {"allreduce": 2, "reduce": 5, "bcast": 6},
}
PYTHON = "/usr/bin/python3"  # Debian's, where python3-mpi4py installs mpi4py
PACKAGES = "openmpi-bin python3-mpi4py python3-numpy"  # mpi4py only suggests NumPy


def link_factor(impl: str, peers: int) -> float:
    """Bytes the busiest link carries each way per byte of the message: the bandwidth term of the
    algorithm's alpha-beta model, ``t = alpha + factor * m / B``.

    Ring, Rabenseifner (reduce-scatter by halving, all-gather by doubling), Hivemind's butterfly and gloo's
    ring send ``2 (n-1)/n`` of the message; recursive doubling the whole message at each of its
    ``log2 n`` steps; the binomial reduce + broadcast the whole message at each of ``2 ceil(log2 n)`` levels
    (the root receives, then sends, one whole message per level).

    >>> [link_factor(impl, 4) for impl in ("mpi-ring", "mpi-recursive-doubling", "mpi-tree", "hivemind")]
    [1.5, 2.0, 4.0, 1.5]
    >>> link_factor("mpi-tree", 2), link_factor("mpi-rabenseifner", 8)
    (2.0, 1.75)
    """
    steps = math.ceil(math.log2(peers))
    if impl == "mpi-recursive-doubling":
        return float(steps)
    if impl == "mpi-tree":
        return 2.0 * steps
    return 2 * (peers - 1) / peers


def mca_arguments(impl: str) -> list[str]:
    """mpirun's arguments that lock the all-reduce down to ``impl``.

    >>> mca_arguments("mpi-tree")[-6:]
    ['--mca', 'coll_tuned_reduce_algorithm', '5', '--mca', 'coll_tuned_bcast_algorithm', '6']
    """
    arguments = ["--mca", "coll_tuned_use_dynamic_rules", "1"]
    for collective, number in ALGORITHMS[impl].items():
        arguments += ["--mca", f"coll_tuned_{collective}_algorithm", str(number)]
    return arguments


def missing() -> str | None:
    """What this machine lacks for the MPI rows, in one sentence; None when nothing."""
    if shutil.which("mpirun") is None:
        return f"mpirun is not installed (apt-get install {PACKAGES})"
    probe = subprocess.run(
        [PYTHON, "-c", "import mpi4py, numpy"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"{PYTHON} cannot import mpi4py and numpy (apt-get install {PACKAGES})"
    return None


CONNECT_FAILED = "failed to TCP connect"  # OpenMPI's words when a pair's connection was refused or timed out
CONNECT_ATTEMPTS = 3


def launch(impl: str, net: Any, sizes: list[int], rounds: int, work_dir: Path, timeout: float) -> int:
    """Run ``impl``'s workers, one per peer of ``net``; returns mpirun's exit status (-9: killed at
    ``timeout``). Each worker writes ``rank-<r>.jsonl`` and mpirun's output goes to ``rank-0.log``.

    A run whose peers could not connect (OpenMPI's TCP connect failed: 8 of 96 launches here before the
    peers preconnected at MPI_Init, 1 of 25 since; it measured nothing) is started again, at most
    ``CONNECT_ATTEMPTS`` times in all, and each new start is printed."""
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        status = _launch_once(impl, net, sizes, rounds, work_dir, timeout)
        log = (work_dir / "rank-0.log").read_text(errors="replace")
        if status == 0 or CONNECT_FAILED not in log or attempt == CONNECT_ATTEMPTS:
            return status
        print(
            f"[allreduce-mpi] {impl}, {net.peers} peers: a TCP connect failed, started again ({attempt + 1})"
        )
    return status


def _launch_once(impl: str, net: Any, sizes: list[int], rounds: int, work_dir: Path, timeout: float) -> int:
    agent = work_dir / "netns-agent"
    # each peer's orted keeps its session directory under its own folder, as on a host of its own: the peers
    # share this host's name and /tmp, and orteds starting at once in one session directory raced for it
    # (mkdir "File exists", a segmentation fault writing hwloc's shared topology there)
    cases = "\n".join(
        f"  {net.address(r)}) ns={net.namespace(r)} tmp='{work_dir}/orte-{r}' ;;" for r in range(net.peers)
    )
    # OpenMPI calls "<agent> <host> <command line>", as it would ssh; the host is a peer's address
    agent.write_text(
        "#!/bin/sh\n# mpirun's launch agent: the command runs in the peer's network namespace, not over ssh\n"
        f'case "$1" in\n{cases}\n  *) echo "netns-agent: no peer at $1" >&2; exit 1 ;;\nesac\n'
        'shift\nmkdir -p "$tmp"\n'
        'exec ip netns exec "$ns" env OMPI_MCA_orte_tmpdir_base="$tmp" /bin/sh -c "$*"\n'
    )
    agent.chmod(0o755)
    subnet = f"{net.address(0).rsplit('.', 1)[0]}.0/24"
    command = [
        "mpirun", "--allow-run-as-root", "--np", str(net.peers),
        "--host", ",".join(f"{net.address(r)}:1" for r in range(net.peers)),
        "--mca", "plm_rsh_agent", str(agent),
        "--mca", "btl", "tcp,self",
        "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
        # every pair connects at MPI_Init, not first under a large message's traffic
        "--mca", "mpi_preconnect_mpi", "1",
        *mca_arguments(impl),
        PYTHON, str(Path(__file__).resolve()), "worker", "--impl", impl,
        "--sizes", ",".join(map(str, sizes)), "--rounds", str(rounds), "--dir", str(work_dir),
    ]  # fmt: skip
    env = dict(
        os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1"
    )
    env.pop("PYTHONPATH", None)  # the workers are Debian's Python, not the venv's
    with (work_dir / "rank-0.log").open("w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work_dir)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return -9


# ------------------------------------------------------------------------------------------------ the worker


def worker(args: argparse.Namespace) -> None:
    import numpy
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    with (args.dir / f"rank-{rank}.jsonl").open("w") as out:
        for size in args.sizes:
            values = size // 4
            for round_index in range(-1, args.rounds):  # round -1: warm-up, not written
                send = numpy.full(values, float(rank + 1), dtype=numpy.float32)
                receive = numpy.empty_like(send)
                comm.Barrier()
                started = time.perf_counter()
                comm.Allreduce(send, receive, op=MPI.SUM)
                seconds = time.perf_counter() - started
                if round_index < 0:
                    continue
                expected = world * (world + 1) / 2
                error = float(numpy.abs(receive - expected).max()) if round_index == 0 else None
                row = {
                    "impl": args.impl,
                    "rank": rank,
                    "peers": world,
                    "size_bytes": values * 4,
                    "round": round_index,
                    "matchmaking_seconds": 0.0,
                    "allreduce_seconds": round(seconds, 6),
                    "max_error": error,
                }
                out.write(json.dumps(row) + "\n")
                out.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one MPI all-reduce peer (started by mpirun, see launch)")
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("--impl", choices=sorted(ALGORITHMS), required=True)
    parser.add_argument("--sizes", required=True, help="bytes per vector, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    args.sizes = [int(v) for v in args.sizes.split(",")]
    worker(args)


if __name__ == "__main__":
    main()
