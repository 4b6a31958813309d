"""Does the local cluster run at the calibrated speeds? The compute model's self-check.

Reads the results of ``grids/calibration-check.yml``: the study's communication-free configurations (the
16-vCPU baseline and 2/4/8/16 peers that never average) on the local cluster, each container given the CPU
of its vCPUs' calibrated rate / D (docs/compute-calibration.md). Prints, per batch size and configuration,
the modelled samples/s per process (measured x D, over its steps without averaging, mean over the
run's processes) beside the calibration's
rate for its vCPUs, with the error of each; then the ceiling speedup (16 x 1 vCPU over 1 x 16) modelled and
calibrated. A faithful model is within 15 % of each. Last, the modelled p2-, p4- and p8-luoff (grid blocks
``averaging*``) beside the 16-core machine's rows recorded in controller/calibrations/model-checks.json;
``--record`` appends each size's check there, which every plan's and report's scale-model caveat reads.

    trainer grid grids/calibration-check.yml --results-dir results/calibration-check
    python benchmarks/calibration_check.py results/calibration-check
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controller.calibration import (  # noqa: E402
    DEFAULT,
    MODEL_CHECKS,
    CalibrationError,
    append_model_check,
    load,
    measured_here,
)
from controller.report.data import load_experiments  # noqa: E402

TOLERANCE = 0.15
ROW = "{:>5} {:>6} {:>6} {:>7} {:>5} {:>24} {:>11} {:>8} {:>16}"


def local_training_rate(steps: list[dict]) -> float | None:
    """Samples/s over the steps without averaging (modelled rows): all of a baseline's, all but the closing
    round's step of a solo peer.

    >>> local_training_rate([{"samples": 32, "step_seconds": 0.05, "averaging_seconds": 0.0},
    ...                      {"samples": 32, "step_seconds": 2.0, "averaging_seconds": 1.9}])
    640.0
    """
    alone = [row for row in steps if not row.get("averaging_seconds") and row.get("step_seconds")]
    seconds = sum(row["step_seconds"] for row in alone)
    return sum(row["samples"] for row in alone) / seconds if seconds else None


def measured(results: Path) -> dict[tuple[int, int, int], dict[str, float]]:
    """(batch size, processes, vCPUs) -> D, the number of runs and the modelled samples/s per process: the
    mean over every process of every repeat, its min and max, and the lowest and highest run mean."""
    pooled: dict[tuple[int, int, int], dict[str, list[float]]] = {}
    for experiment in load_experiments(results):
        if not experiment.complete or experiment.strategy not in ("baseline", "solo"):
            continue
        rates = [rate for peer in experiment.peers if (rate := local_training_rate(peer.steps))]
        if not rates:
            continue
        settings = experiment.settings
        key = (int(settings["batch_size"]), 1 if experiment.is_baseline else experiment.peer_count)
        runs = pooled.setdefault((*key, int(settings["vcpus"])), {"rates": [], "means": [], "dilations": []})
        runs["rates"] += rates
        runs["means"].append(statistics.fmean(rates))
        runs["dilations"].append(experiment.time_dilation)
    return {
        key: {
            "dilation": statistics.fmean(runs["dilations"]),
            "runs": len(runs["means"]),
            "mean": statistics.fmean(runs["rates"]),
            "min": min(runs["rates"]),
            "max": max(runs["rates"]),
            "lowest_run": min(runs["means"]),
            "highest_run": max(runs["means"]),
        }
        for key, runs in pooled.items()
    }


#: docs/study-scale.md, the 16-core device on 2026-11-23, before the OpenMP fix (p2 and p4 over 200 steps, p8
#: over 60): per peer samples/s, averaging share of the step, all-reduce s
def device_rows(records: Path = MODEL_CHECKS) -> dict[int, dict]:
    """The 16-core machine's Hivemind rows by peer count (the records' ``device_rows``)."""
    import json

    return {int(row["peers"]): row for row in json.loads(records.read_text()).get("device_rows", [])}


def averaging_rows(results: Path, records: Path = MODEL_CHECKS) -> tuple[list[str], list[dict]]:
    """The modelled p2/p4/p8-luoff (grid blocks ``averaging*``) beside the 16-core machine's recorded rows:
    the printed lines, and per run a check (a peer's vCPUs, the samples/s error, the averaging share's in
    points) as ``--record`` appends it."""
    lines, checks = [], []
    device = device_rows(records)
    for experiment in load_experiments(results):
        reference = device.get(experiment.peer_count)
        if experiment.strategy != "hivemind" or not experiment.complete or reference is None:
            continue
        rates = [rate for p in experiment.peers if (rate := p.summary.get("samples_per_second"))]
        steps = [row for p in experiment.peers for row in p.steps]
        share = sum(r["averaging_seconds"] or 0 for r in steps) / sum(r["step_seconds"] or 0 for r in steps)
        allreduce = [
            row["allreduce_seconds"]
            for p in experiment.peers
            for row in p.rounds
            if row["outcome"] == "ok" and row.get("allreduce_seconds")
        ]
        modelled = (statistics.fmean(rates), share, statistics.fmean(allreduce) if allreduce else None)
        name = reference["name"]
        expected = (
            reference["samples_per_second_per_peer"],
            reference["averaging_share"],
            reference["allreduce_seconds"],
        )
        for label, value, measured_value in zip(
            ("samples/s per peer", "averaging share", "all-reduce s"), modelled, expected, strict=True
        ):
            error = f"{value / measured_value - 1:+.0%}" if value is not None else "-"
            shown = f"{value:.3g}" if value is not None else "-"
            lines.append(
                f"{name:<9} {label:<19} modelled {shown:>7}  16-core {measured_value:.3g}  ({error})"
            )
        failed = sum(1 for p in experiment.peers for row in p.rounds if row["outcome"] != "ok")
        max_steps = experiment.settings.get("max_steps")
        dilation = experiment.time_dilation
        lines.append(f"{name:<9} D = {dilation:.2f}, {max_steps} steps, failed rounds {failed}")
        checks.append(
            {
                "vcpus": int(reference["vcpus"]),
                "throughput_error": round(modelled[0] / expected[0] - 1, 4),
                "averaging_share_points": round((modelled[1] - expected[1]) * 100, 2),
                "against": f"{name} on the 16-core machine ({reference['measured_on'].get('date', '')})",
            }
        )
    return lines, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the results directory trainer grid wrote")
    parser.add_argument("--calibration", type=Path, default=DEFAULT, help="the calibration the runs used")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument(
        "--record",
        nargs="?",
        const=MODEL_CHECKS,
        type=Path,
        help="append each averaging run's check to the model's records (default: %(const)s)",
    )
    args = parser.parse_args(argv)
    try:
        calibration = load(args.calibration)
    except CalibrationError as exc:
        print(f"calibration_check: {exc}", file=sys.stderr)
        return 2
    runs = measured(args.results)
    averaging, checks = averaging_rows(args.results)
    if not runs and not averaging:
        print(f"calibration_check: no complete runs in {args.results}", file=sys.stderr)
        return 2
    print(f"calibration: {calibration.describe()}")
    print(ROW.format("batch", "procs", "vCPUs", "D", "runs", "modelled (min-max)", "calibrated", "error",
                     "runs' errors"))  # fmt: skip
    worst = 0.0
    for (batch, procs, vcpus), run in sorted(runs.items()):
        expected = calibration.rate(args.model, batch, vcpus)
        error = run["mean"] / expected - 1 if expected else None
        worst = max(worst, abs(error or 0.0))
        spread = f"{run['mean']:.1f} ({run['min']:.0f}-{run['max']:.0f})"
        shown = f"{error:+.1%}" if error is not None else "-"
        extremes = "-"
        if expected and run["runs"] > 1:
            extremes = f"{run['lowest_run'] / expected - 1:+.1%}..{run['highest_run'] / expected - 1:+.1%}"
        dilation, calibrated = f"{run['dilation']:.2f}", f"{expected or 0:.0f}"
        print(ROW.format(batch, procs, vcpus, dilation, run["runs"], spread, calibrated, shown, extremes))
    for batch in sorted({key[0] for key in runs}):
        peers, baseline = runs.get((batch, 16, 1)), runs.get((batch, 1, 16))
        expected = calibration.ceiling(args.model, batch, [1] * 16, 16)
        if not (peers and baseline and expected):
            continue
        modelled = 16 * peers["mean"] / baseline["mean"]
        error = modelled / expected - 1
        worst = max(worst, abs(error))
        print(f"BS {batch}: ceiling 16 x 1 over 1 x 16 modelled {modelled:.2f}, calibrated {expected:.2f} "
              f"({error:+.1%})")  # fmt: skip
    if runs:
        print(f"largest error {worst:.1%}: {'within' if worst <= TOLERANCE else 'OUTSIDE'} {TOLERANCE:.0%}")
    if averaging:
        print("\nwith averaging (the model against the 16-core device, docs/study-scale.md):")
        print("\n".join(averaging))
    if args.record:
        for check in checks:
            command = "python benchmarks/calibration_check.py " + " ".join(argv or sys.argv[1:])
            append_model_check({**check, "measured_on": measured_here(), "command": command}, args.record)
        print(f"{len(checks)} checks recorded in {args.record}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
