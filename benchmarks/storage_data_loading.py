"""Data loading from CephFS versus a local copy: the same experiment on the local cluster, twice.

Runs ``playbooks/experiment.yml`` with ``dataset_storage=cephfs`` and then ``dataset_storage=local`` (same
peers, model, data and steps, on a cluster of its own that it tears down at the end) and prints, per run and
peer, the data-loading time and its share of step time from each peer's summary.json, then the ratio of the
mean data-loading time per step, CephFS over local, measured in this one run.

    .venv/bin/python benchmarks/storage_data_loading.py --peers 2 --max-steps 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# its own container names, network and subnet: never the default cluster or a test's
CLUSTER = {
    "testbed_container_prefix": "testbed-bench-",
    "testbed_network": "testbed-bench",
    "testbed_network_prefix": "10.89.74",
}


def playbook(name: str, extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "images" / "containers.conf")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    command = [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / name)]
    return subprocess.run(
        [*command, "-e", json.dumps({**CLUSTER, **extra})],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def per_step_data_seconds(results: Path, peers: list[str]) -> list[tuple[str, int, float, float]]:
    """(peer, steps, mean data-loading seconds per step, data share of step time) from each summary.json."""
    rows = []
    for peer in peers:
        summary = json.loads((results / peer / "summary.json").read_text())
        components = summary["components"]
        data, step = components["data_seconds"]["total"], components["step_seconds"]["total"]
        rows.append((peer, summary["steps"], data / summary["steps"], data / step))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model", default="smallcnn")
    args = parser.parse_args()
    peers = [f"peer-{index:02d}" for index in range(1, args.peers + 1)]
    means: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="storage-bench-") as results_root:
        try:
            print("storage  wall_s  peer     steps  data_ms/step  data_share")
            for storage in ("cephfs", "local"):
                experiment_id = f"storage-bench-{storage}-{int(time.time())}"
                started = time.monotonic()
                run = playbook(
                    "experiment.yml",
                    {
                        "peers": args.peers,
                        "strategy": "hivemind",
                        "model": args.model,
                        "dataset": "fashion-mnist",
                        "batch_size": args.batch_size,
                        "max_steps": args.max_steps,
                        "monitoring": False,
                        "dataset_storage": storage,
                        "experiment_id": experiment_id,
                        "results_root": results_root,
                    },
                )
                wall = time.monotonic() - started
                if run.returncode != 0:
                    print(run.stdout[-4000:], file=sys.stderr)
                    return 1
                rows = per_step_data_seconds(Path(results_root) / experiment_id, peers)
                for peer, steps, data, share in rows:
                    print(f"{storage:7}  {wall:6.0f}  {peer}  {steps:5d}  {1000 * data:12.2f}  {share:10.1%}")
                means[storage] = sum(row[2] for row in rows) / len(rows)
        finally:
            playbook("teardown.yml", {})
    print(f"data loading per step, CephFS / local: {means['cephfs'] / means['local']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
