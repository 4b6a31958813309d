"""Is the dilated, calibrated model of Hivemind peers faithful? A local ground truth.

The same small configuration is measured two ways on this machine:

- **the truth**: two one-core Hivemind peers as bare processes, each pinned to a core of its own with one
  thread (``benchmarks/study_scale.py``: ``p2-luoff``), beside two solo loops placed the same way
  (``p2-solo``); what two one-vCPU VMs would do, at this machine's speed;
- **the model**: the local cluster's containers (``playbooks/experiment.yml``), dilated and calibrated with a
  calibration of this very machine (``trainer calibrate --cores 2 --threads 1``, written first), so the model
  is asked to reproduce this machine's one-core peers: two solo peers (``strategy=solo``), then the two
  Hivemind peers with the truth's settings.

It prints, for both, a peer's samples/s over its solo loop's (``local``), the compute and averaging shares of
the step, and the model's errors: goal within 15 % on ``local`` and 10 points on the averaging share.

    python benchmarks/scale_model_truth.py --out results/scale-model-truth            # ~6 min here
    python benchmarks/scale_model_truth.py --out results/scale-model-truth --table-only
    python benchmarks/scale_model_truth.py --out results/truth-d3 --time-dilation 3   # containers at 1/3

Every part is kept in ``--out`` (truth/, calibration.json, model/) and not run again when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.study_scale import measure  # noqa: E402
from controller.calibration import MODEL_CHECKS, append_model_check, measured_here  # noqa: E402

LOCAL_TOLERANCE = 0.15  # relative, on a peer's samples/s over its solo loop's
SHARE_TOLERANCE = 0.10  # absolute, on the averaging share of the step
MODEL_IDS = {"solo": "truth-model-solo", "hivemind": "truth-model-hivemind"}


def run(command: list[str], log: Path, what: str) -> int:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "images" / "containers.conf"))
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    print(f"[truth] {what} ... (log {log})", flush=True)
    with log.open("w") as out:
        return subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def truth(args: argparse.Namespace) -> int:
    command = [
        sys.executable, str(REPO / "benchmarks" / "study_scale.py"),
        "--total-vcpus", "2", "--peers", "2", "--local-updates", "off", "--only", "p2-solo,p2-luoff",
        "--steps", str(args.steps), "--matchmaking-time", str(args.matchmaking_time),
        "--target-batch-size", str(args.target_batch_size), "--out", str(args.out / "truth"),
    ]  # fmt: skip
    return run(command, args.out / "truth.log", "the truth: two bare one-core peers and their solo loops")


def calibration(args: argparse.Namespace) -> int:
    if (args.out / "calibration.json").exists():
        return 0
    command = [
        sys.executable, "-m", "trainer", "calibrate", "--cores", "2", "--threads", "1", "--model", "resnet18",
        "--batch-sizes", "32", "--steps", str(args.steps), "--out", str(args.out / "calibration.json"),
    ]  # fmt: skip
    return run(command, args.out / "calibration.log", "this machine's calibration at one thread")


def model(args: argparse.Namespace, strategy: str) -> int:
    experiment_id = MODEL_IDS[strategy]
    if (args.out / "model" / experiment_id / "experiment.json").exists():
        return 0
    variables = {
        "experiment_id": experiment_id,
        "strategy": strategy,
        "peers": 2,
        "vcpus": 1,
        "model": "resnet18",
        "dataset": "synthetic",
        "batch_size": 32,
        "learning_rate": 0.01,
        "max_steps": args.steps,
        "calibration": str((args.out / "calibration.json").resolve()),
        "time_dilation": args.time_dilation,
        "monitoring": False,
        "cpu_probe_seconds": 0,
        "results_root": str((args.out / "model").resolve()),
        "force": True,  # the hosts may keep an earlier call's run of the same id; this --out has none
    }
    if strategy == "hivemind":
        variables.update(
            local_updates=False,
            target_batch_size=args.target_batch_size,
            matchmaking_time=args.matchmaking_time,
            averaging_timeout=60,
            finish_grace=5,
            bandwidth_mbit=100000,  # the truth talks over loopback
        )
    command = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        str(REPO / "playbooks" / "experiment.yml"),
        *(["-i", args.inventory] if args.inventory else []),
        "-e", json.dumps(variables),
    ]  # fmt: skip
    return run(command, args.out / f"model-{strategy}.log", f"the model: {strategy} peers in containers")


def figures(directory: Path) -> dict[str, Any] | None:
    row = measure(directory) if directory.is_dir() else None
    if not row or not row["step"]:
        return None
    return {
        **row,
        "compute_share": row["compute"] / row["step"],
        "averaging_share": row["averaging"] / row["step"],
    }


def compare(args: argparse.Namespace) -> tuple[list[str], bool, dict[str, float] | None]:
    """The table, whether the model is within both tolerances, and its errors (None where a side is
    missing): ``local`` relative, ``averaging_points`` in points of the step."""
    sides = {
        "truth (bare, 1 core each)": (
            args.out / "truth" / "_reference" / "p2-solo",
            args.out / "truth" / "p2-luoff",
        ),
        "model (containers, D)": tuple(args.out / "model" / MODEL_IDS[s] for s in ("solo", "hivemind")),
    }
    rows: dict[str, dict[str, float]] = {}
    lines = [
        f"{'':<27} {'solo/s':>8} {'peer/s':>8} {'local':>6} {'compute':>8} {'averaging':>9} {'rounds':>7}"
    ]
    for name, (solo_dir, peer_dir) in sides.items():
        solo, peer = figures(solo_dir), figures(peer_dir)
        if not solo or not peer:
            lines.append(f"{name:<27} missing ({solo_dir if not solo else peer_dir})")
            continue
        rows[name] = {
            "local": peer["per_peer"] / solo["per_peer"],
            "compute": peer["compute_share"],
            "averaging": peer["averaging_share"],
        }
        lines.append(
            f"{name:<27} {solo['per_peer']:>8.1f} {peer['per_peer']:>8.1f} {rows[name]['local']:>6.2f} "
            f"{peer['compute_share']:>8.2f} {peer['averaging_share']:>9.2f} "
            f"{peer['rounds_ok']:>3}/{peer['rounds_failed']:<3}"
        )
    if len(rows) < 2:
        return lines, False, None
    real, modelled = rows.values()
    local_error = modelled["local"] / real["local"] - 1
    share_error = modelled["averaging"] - real["averaging"]
    compute_error = modelled["compute"] - real["compute"]
    within = abs(local_error) <= LOCAL_TOLERANCE and abs(share_error) <= SHARE_TOLERANCE
    lines += [
        f"error: local {local_error:+.1%} (goal within {LOCAL_TOLERANCE:.0%}), averaging share "
        f"{share_error * 100:+.1f} points (goal within {SHARE_TOLERANCE * 100:.0f}), compute share "
        f"{compute_error * 100:+.1f} points",
        "the model is " + ("within both goals" if within else "OUTSIDE the goals"),
    ]
    return lines, within, {"local": local_error, "averaging_points": share_error * 100}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "scale-model-truth")
    parser.add_argument("--steps", type=int, default=120, help="steps per process (both sides)")
    parser.add_argument("--target-batch-size", type=int, default=1250)
    parser.add_argument("--matchmaking-time", type=float, default=2.0)
    parser.add_argument(
        "--time-dilation", default="auto", help="the model's D: auto (the smallest that fits) or a factor"
    )
    parser.add_argument("--inventory", default="", help="Ansible inventory (default: ansible.cfg's)")
    parser.add_argument("--table-only", action="store_true", help="print the comparison of what --out holds")
    parser.add_argument(
        "--record",
        nargs="?",
        const=MODEL_CHECKS,
        type=Path,
        help="append the check to the model's records (default: %(const)s), which every plan's and "
        "report's scale-model caveat reads",
    )
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2 and not args.table_only:
        parser.error("needs two cores: the truth pins one peer to each")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for step in (truth, calibration, lambda a: model(a, "solo"), lambda a: model(a, "hivemind")):
            if step(args) != 0:
                print("[truth] a part failed; its log is in --out", flush=True)
                break
    lines, within, errors = compare(args)
    print("\n".join(lines))
    if args.record and errors:
        append_model_check(
            {
                "vcpus": 1,
                "throughput_error": round(errors["local"], 4),
                "averaging_share_points": round(errors["averaging_points"], 2),
                "against": "two bare one-core peers on this machine",
                "measured_on": measured_here(),
                "command": "python benchmarks/scale_model_truth.py " + " ".join(argv or sys.argv[1:]),
            },
            args.record,
        )
        print(f"recorded in {args.record}")
    print(
        "local: a peer's samples/s over its solo loop's; compute, averaging: shares of the peer's step "
        "(means over its steps); the model's solo and peers run at the calibrated share of a core, D from "
        "the plan"
    )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
