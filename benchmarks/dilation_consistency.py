"""Is the time-dilated local cluster consistent with itself? (docs/time-dilation.md)

Reads the results of ``grids/dilation.yml`` (one modelled cluster run at two dilation factors, repeated) in
modelled time, as ``trainer report`` does (``controller/report/data.py``), and prints per factor the mean and
the spread (min-max) over the repeats of:

- modelled samples/s per peer (summary.json ``modelled``);
- the step-time shares: data loading, compute, averaging (of the mean step);
- the modelled all-reduce per ok gradient round (rounds.csv, / D);
- failed rounds and the peers' samples/s max/min;

then, for each figure, the two factors' means apart (|a - b| / mean of both; for a share, |a - b| in points
of the step time) against the tolerance, 15 %.

    trainer grid grids/dilation.yml && python benchmarks/dilation_consistency.py results/
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controller.report.data import Experiment, load_experiments  # noqa: E402

TOLERANCE = 0.15
FIGURES = (
    ("samples/s per peer", "samples_per_peer"),
    ("data share of step", "data_share"),
    ("compute share of step", "compute_share"),
    ("averaging share of step", "averaging_share"),
    ("all-reduce per round, s", "allreduce_seconds"),
)


def figures(experiment: Experiment) -> dict[str, float | None]:
    """The modelled figures of one run (its rows are already in modelled time)."""
    rates = [p.summary.get("samples_per_second") for p in experiment.peers]
    rates = [rate for rate in rates if rate]
    steps = [row for p in experiment.peers for row in p.steps]
    step_total = sum(row["step_seconds"] or 0.0 for row in steps)

    def share(column: str) -> float | None:
        return sum(row[column] or 0.0 for row in steps) / step_total if step_total else None

    allreduce = [
        row["allreduce_seconds"]
        for p in experiment.peers
        for row in p.rounds
        if row["kind"] == "gradients" and row["outcome"] == "ok" and row["allreduce_seconds"]
    ]
    return {
        "samples_per_peer": statistics.mean(rates) if rates else None,
        "data_share": share("data_seconds"),
        "compute_share": share("compute_seconds"),
        "averaging_share": share("averaging_seconds"),
        "allreduce_seconds": statistics.median(allreduce) if allreduce else None,
        "failed_rounds": sum(1 for p in experiment.peers for row in p.rounds if row["outcome"] != "ok"),
        "peer_spread": max(rates) / min(rates) if len(rates) > 1 else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the results directory trainer grid wrote")
    args = parser.parse_args()
    by_factor: dict[float, list[dict[str, float | None]]] = defaultdict(list)
    for experiment in load_experiments(args.results):
        if experiment.complete and experiment.settings.get("peers") == 4:
            by_factor[round(experiment.time_dilation, 2)].append(figures(experiment))
    if len(by_factor) != 2:
        print(
            f"need complete runs at exactly two dilation factors, found {sorted(by_factor)}", file=sys.stderr
        )
        return 2
    low, high = sorted(by_factor)
    print(
        f"modelled figures, {len(by_factor[low])} runs at D = {low} and {len(by_factor[high])} at D = {high}"
    )
    print(f"{'figure':<26} {'D = ' + str(low):>26} {'D = ' + str(high):>26} {'apart':>7}")
    worst = 0.0
    for label, key in FIGURES:
        cells, means = [], []
        for factor in (low, high):
            values = [run[key] for run in by_factor[factor] if run[key] is not None]
            if not values:
                cells.append("-")
                continue
            means.append(statistics.mean(values))
            cells.append(f"{means[-1]:.3f} ({min(values):.3f}-{max(values):.3f})")
        apart = None
        if len(means) == 2 and any(means):
            # a share: its gap in points of the step (a 1 % share 0.2 points off is not 20 % off)
            share = key.endswith("_share")
            apart = abs(means[0] - means[1]) if share else abs(means[0] - means[1]) / statistics.mean(means)
        worst = max(worst, apart or 0.0)
        apart_text = "-" if apart is None else f"{apart:.0%}" + (" pts" if key.endswith("_share") else "")
        print(f"{label:<26} {cells[0]:>26} {cells[1]:>26} {apart_text:>7}")
    for factor in (low, high):
        runs = by_factor[factor]
        spreads = [f"{run['peer_spread']:.2f}" for run in runs if run["peer_spread"]]
        failed = [int(run["failed_rounds"] or 0) for run in runs]
        print(f"D = {factor}: failed rounds per run {failed}; peers' samples/s max/min {', '.join(spreads)}")
    print(f"largest gap between the factors: {worst:.0%} (tolerance {TOLERANCE:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
