"""How idle OpenMP threads wait, for peers that share the machine under CPU quotas (the local cluster).

Starts ``--peers`` containers of the local cluster's image at once, each with the same CFS quota
(``--cpus``) and ``--threads`` torch threads, each training torchvision's ResNet18 on random 3x32x32 batches
for ``--steps`` steps, first with GNU OpenMP's default (idle threads spin: ``OMP_WAIT_POLICY`` unset), then
with ``OMP_WAIT_POLICY=PASSIVE`` (they sleep; what the trainer unit sets). Prints per policy each peer's wall
and CPU seconds per step, how far apart the peers are ((max - min) / max) in each, and the cores each received
(CPU / wall); then the ratios measured in this one run: CPU seconds per step and the slowest peer's wall,
default over passive. With ``--threads 1`` both policies are the same: the spread is then the machine's own
between equal containers doing the same work, with no communication at all.

    .venv/bin/python benchmarks/omp_wait_policy.py --peers 8 --cpus 0.219 --threads 2 --steps 30

Needs podman and ``localhost/testbed-node:latest`` (built by ``make demo`` or the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = "localhost/testbed-node:latest"
PYTHON = "/opt/testbed/venv/bin/python"  # the image's venv, with torch and torchvision

WORKLOAD = """
import json, os, sys, time
import torch
from torchvision.models import resnet18
threads, name, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
model = resnet18(num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
images, labels = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
open(f"/bench/ready/{name}", "w").close()  # ready: the benchmark sets the common start once all are
give_up = time.monotonic() + float(sys.argv[4])
while not os.path.exists("/bench/ready/start"):
    if time.monotonic() > give_up:
        sys.exit("no common start came")
    time.sleep(0.01)
start_at = float(open("/bench/ready/start").read())
while time.time() < start_at:
    time.sleep(0.001)
cpu, wall = time.process_time(), time.monotonic()
for _ in range(steps):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
print(json.dumps({"wall": time.monotonic() - wall, "cpu": time.process_time() - cpu}))
"""


def run_policy(policy: str | None, args: argparse.Namespace, workdir: Path) -> list[dict[str, float]]:
    """Every peer's {"wall", "cpu"} seconds for the steps, all peers started at one common time: set once
    every peer has built its model and said so (a file in ready/), not after a fixed delay."""
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "images" / "containers.conf")}
    ready = workdir / "ready"
    ready.mkdir(mode=0o777)
    policy_env = ["-e", f"OMP_WAIT_POLICY={policy}"] if policy else []
    quota = ["--cpu-period", str(args.cpu_period), "--cpu-quota", str(round(args.cpus * args.cpu_period))]
    names = [f"omp-wait-{os.getpid()}-{policy or 'default'}-{i}" for i in range(args.peers)]
    peers = [
        subprocess.Popen(["podman", "run", "--rm", "--name", name, *quota, *policy_env,
                          "-v", f"{workdir}:/bench:ro", "-v", f"{ready}:/bench/ready", "--entrypoint", PYTHON,
                          IMAGE, "/bench/workload.py", str(args.threads), name, str(args.steps),
                          str(args.start_timeout)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in names
    ]  # fmt: skip
    deadline = time.monotonic() + args.start_timeout
    while len(list(ready.glob("omp-wait-*"))) < args.peers:
        if time.monotonic() > deadline or any(peer.poll() is not None for peer in peers):
            # a killed `podman run` leaves its container running: remove them by name
            subprocess.run(["podman", "rm", "--force", "--time", "0", *names], env=env, capture_output=True)
            exited = [peer.communicate()[1].strip()[-2000:] for peer in peers if peer.returncode]
            raise SystemExit(f"{len(list(ready.glob('omp-wait-*')))} of {args.peers} peers were ready within "
                             f"{args.start_timeout:g} s (policy {policy or 'default'})"
                             + "".join(f"\na peer exited: {err}" for err in exited if err))  # fmt: skip
        time.sleep(0.05)
    (ready / "start.tmp").write_text(str(time.time() + 0.2))  # a moment for every peer to read it
    (ready / "start.tmp").rename(ready / "start")
    results = []
    for peer in peers:
        out, err = peer.communicate(timeout=1800)
        if peer.returncode != 0:
            raise SystemExit(f"a peer failed (policy {policy or 'default'}): {err.strip()[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    shutil.rmtree(ready)
    return results


def _apart(values: list[float]) -> float:
    """(max - min) / max: how far apart the peers are."""
    return (max(values) - min(values)) / max(values)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--cpus", type=float, default=0.219, help="each container's --cpus (make demo's)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per peer")
    parser.add_argument("--cpu-period", type=int, default=100_000, help="CFS period, us (podman's default)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--start-timeout", type=float, default=120.0,
                        help="seconds for every container to start and build its model")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="omp-wait-") as tmp:
        workdir = Path(tmp)
        (workdir / "workload.py").write_text(WORKLOAD)
        workdir.chmod(0o755)
        policies = {"default": None, "passive": "PASSIVE"}
        measured = {label: run_policy(policy, args, workdir) for label, policy in policies.items()}
    print(f"{args.peers} peers, --cpus {args.cpus} (period {args.cpu_period} us), {args.threads} threads, "
          f"{args.steps} ResNet18 steps each")  # fmt: skip
    print(f"{'policy':8} {'wall s':>15} {'apart':>6} {'CPU s/step':>11} {'apart':>6} {'cores':>11}")
    summary = {}
    for label, peers in measured.items():
        walls = [peer["wall"] for peer in peers]
        steps_cpu = [peer["cpu"] / args.steps for peer in peers]
        cores = [peer["cpu"] / peer["wall"] for peer in peers]
        summary[label] = (max(walls), sum(steps_cpu) / len(steps_cpu))
        wall_range = f"{min(walls):7.2f}-{max(walls):<7.2f}"
        cores_range = f"{min(cores):5.3f}-{max(cores):5.3f}"
        mean_cpu = summary[label][1]
        cpu_apart = f"{_apart(steps_cpu):6.0%}"
        print(f"{label:8} {wall_range} {_apart(walls):6.0%} {mean_cpu:11.3f} {cpu_apart} {cores_range}")
    print(f"ratio default/passive: CPU per step {summary['default'][1] / summary['passive'][1]:.2f}, "
          f"slowest peer's wall {summary['default'][0] / summary['passive'][0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
