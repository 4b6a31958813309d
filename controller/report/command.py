"""``trainer report RESULTS_DIR [--out DIR]``: bottleneck report of a results directory.

Writes `report.md` with tables and PNG plots, and each table as CSV, into `--out` (default
RESULTS_DIR/report): loss over wall time (baseline vs Hivemind at the same batch size and LR), time to
target loss with speedup and scaling efficiency, the step-time breakdown, each peer's contribution and who
waited for whom, averaging time per round against the bandwidth lower bound, the effects of TBS, local
updates, peers, batch size and LR with every experiment shown, and for runs on shaped links the averaging
share against the link rate. Every number is computed from the raw steps.csv / rounds.csv
(controller/report/metrics.py states the definitions).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

from controller.calibration import DEFAULT as DEFAULT_CALIBRATION
from controller.calibration import load as load_calibration
from controller.report.analysis import analyse
from controller.report.data import Experiment, load_experiments
from controller.report.effects import EFFECT_FACTORS, effect_verdicts
from controller.report.headline import grid_of, headline_table
from controller.report.intervals import noise_floor_lines, verdict_lines
from controller.report.metrics import Analysis
from controller.report.metrics import __doc__ as DEFINITIONS
from controller.report.network import cross_traffic_lines, link_rate_lines, preprocessing_factors
from controller.report.timeouts import recommendation_lines

_BANDWIDTH = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]?)(bit|b|B|byte)?(?:/s|ps)?\s*$"
)
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_bandwidth(text: str) -> float:
    """Bytes per second from '1Gbit', '940Mbit/s', '125MB', '1.25e8' (bytes); raise ValueError otherwise.

    >>> parse_bandwidth("1Gbit")
    125000000.0
    """
    match = _BANDWIDTH.match(text)
    if not match or float(match[1]) <= 0:
        raise ValueError(
            f"bandwidth must be a positive number with an optional unit like 1Gbit or 125MB: {text!r}"
        )
    value = float(match[1]) * _PREFIX[match[2]]
    return value / 8 if match[3] in ("bit", "b") else value


#: the line ``trainer --help`` shows for this command
HELP = "tables and plots from a results directory"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = "Tables and plots (report.md, PNG, CSV) from a results directory."
    parser.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="e.g. results/")
    parser.add_argument("--out", type=Path, help="output directory (default: RESULTS_DIR/report)")
    parser.add_argument(
        "--target-loss",
        type=float,
        help="target training loss for every group "
        "(default: per batch size and LR, the baselines' worst final loss; without baselines, "
        "the worst final loss of the group's runs)",
    )
    parser.add_argument(
        "--target-accuracy",
        type=float,
        help="target validation accuracy (0-1) for every group (default: per batch size and LR, the accuracy "
        "every baseline repeat reaches); needs runs with evals.csv (-e eval_every=K)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        help="compute calibration for the speedups' no-communication ceilings (`trainer calibrate` writes "
        "one; default: the one the runs' containers followed, recorded in experiment.json, else the shipped "
        "16-core machine's)",
    )
    parser.add_argument(
        "--bandwidth",
        help="link bandwidth B for the averaging lower bound, e.g. 1Gbit or 125MB (per second); default: the "
        "value measured into experiment.json (network.bandwidth_bytes_per_second), else no bound",
    )


def recorded_calibration(experiments: list[Experiment]) -> Path:
    """The calibration the runs' containers followed (experiment.json ``compute``) where they agree on one
    that can still be read, else the shipped one."""
    files = {e.compute.get("calibration_file") for e in experiments if e.compute}
    if len(files) == 1 and (recorded := Path(str(files.pop()))).is_file():
        return recorded
    return DEFAULT_CALIBRATION


def main(args: argparse.Namespace) -> int:
    try:
        bandwidth = parse_bandwidth(args.bandwidth) if args.bandwidth else None
        if args.target_loss is not None and not args.target_loss > 0:
            raise ValueError(f"--target-loss must be positive (got {args.target_loss})")
        if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
            raise ValueError(f"--target-accuracy must be in (0, 1] (got {args.target_accuracy})")
        if not args.results_dir.is_dir():
            raise ValueError(f"results directory not found: {args.results_dir}")
        if args.calibration is not None:  # refused before any result is read
            load_calibration(args.calibration)
        experiments = load_experiments(args.results_dir)
        if not experiments:
            raise ValueError(
                f"no experiment results (peer directories with steps.csv) under {args.results_dir}"
            )
        calibration = load_calibration(args.calibration or recorded_calibration(experiments))
    except ValueError as error:
        print(f"trainer: error: {error}", file=sys.stderr)
        return 2
    out = args.out or args.results_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    analysis = analyse(
        experiments,
        target_loss=args.target_loss,
        target_accuracy=args.target_accuracy,
        bandwidth=bandwidth,
        calibration=calibration,
    )
    headline = headline_table(grid_of(args.results_dir), experiments, analysis.curves)
    if headline is not None:
        analysis.tables["headline"] = headline
    report = write_report(analysis, out, args.results_dir)
    print(f"report: {report} ({len(experiments)} experiments)")
    return 0


def write_report(analysis: Analysis, out: Path, results_dir: Path) -> Path:
    """Write every CSV and PNG and report.md into `out`; return report.md's path.

    Longer than the project's other functions on purpose: report.md's sections in the order the page shows
    them, each a few lines, read top to bottom as the page reads."""
    from controller.report import plots as report_plots

    for table in analysis.tables.values():
        table.write_csv(out)
    loss_paths = report_plots.loss_plots(analysis, out)
    breakdown = report_plots.breakdown_plot(analysis, out)
    averaging = report_plots.averaging_plot(analysis, out)
    effects = report_plots.effect_plots(analysis, out)
    network = report_plots.network_plot(analysis, out)
    faults = report_plots.fault_plots(analysis, out)
    target_curves = report_plots.target_curve_plot(analysis, out)
    headline = report_plots.headline_plot(analysis, out)

    experiments = analysis.experiments
    by_strategy = Counter("baseline" if e.is_baseline else e.strategy_label() for e in experiments)
    incomplete = [e.experiment_id for e in experiments if not e.complete]
    lines = [
        "# Bottleneck report",
        "",
        f"Results: `{results_dir}` · {len(experiments)} experiments "
        f"({', '.join(f'{count} {name}' for name, count in sorted(by_strategy.items()))}) · "
        f"generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        "",
        *noise_floor_lines(analysis.tables["noise_floor"]),
        "",
        *([_section(analysis, "headline")] if "headline" in analysis.tables else []),
        *([f"![headline comparisons]({headline.name})", ""] if headline else []),
        *([f"![target curves]({target_curves.name})", ""] if target_curves else []),
    ]
    if incomplete:
        lines += [
            f"Incomplete experiments (included, marked in `experiments.csv`): {', '.join(incomplete)}",
            "",
        ]
    apart = [(e.experiment_id, warning) for e in experiments for warning in e.clocks.get("warnings") or []]
    if apart:
        lines += [
            "Hosts' clocks apart at the start (their CPU probe's common start and fault timeline are "
            "unreliable; experiment.json's `clocks`, docs/real-vms.md):",
            *(f"- {experiment_id}: {warning}" for experiment_id, warning in apart),
            "",
        ]
    dilated = sorted({f"{e.time_dilation:.2f}" for e in experiments if e.time_dilation > 1})
    if dilated:
        lines += [
            f"Times and rates are modelled (time-dilated runs, D = {', '.join(dilated)}; `time_dilation` in "
            "`experiments.csv`): measured durations / D, the link and samples/s x D (docs/time-dilation.md).",
            "",
        ]
    if analysis.calibration is not None:
        lines += [
            "Ceilings (`ceiling_speedup`): the throughput speedup with averaging for free, the peers' "
            "samples/s summed over the baseline's, from the compute calibration "
            f"{analysis.calibration.describe()}; "
            "blank where it has no rate for the model, batch size or vCPUs (docs/compute-calibration.md).",
            "",
        ]
    local = [e for e in experiments if e.time_dilation > 1]
    if local:
        calibrated = [e for e in local if e.compute]
        sources = sorted({str(e.compute.get("calibration_file")) for e in calibrated})
        lines += [
            f"Compute of the dilated runs: {len(calibrated)} of {len(local)} ran each container at its "
            f"vCPUs' calibrated rate / D ({', '.join(sources) or 'no calibration'}); the others modelled "
            "threads as scaling linearly (no calibrated rate for their model, batch size or vCPUs).",
            "",
        ]
    rows = analysis.tables["experiments"].rows
    lines += _received_compute_lines(experiments)
    outside = {row["experiment_id"]: row["scale_model"] for row in rows if row.get("scale_model")}
    if outside:
        lines += [
            f"Outside the scale model's validated range ({len(outside)} runs, `scale_model` in "
            "`experiments.csv`; docs/study-scale.md says what a 16-core run must measure to extend it):",
            *(f"- {experiment_id}: {caveat}" for experiment_id, caveat in sorted(outside.items())),
            "",
        ]
    model_sizes = ", ".join(f"{model}: {size / 1e6:.2f} MB" for model, size in analysis.model_bytes.items())
    lines += [
        _section(analysis, "diagnosis"),
        _section(analysis, "prediction"),
        "## Definitions",
        "",
        _definitions(),
        "",
        "Model sizes M (the parameter bytes the trainer measured, summary.json memory.parameter_bytes): "
        f"{model_sizes or 'none'}.",
        "",
        "## Loss over wall time (baseline vs Hivemind, same batch size and LR)",
        "",
        *(f"![{path.stem}]({path.name})" for path in loss_paths),
        "",
        _section(analysis, "time_to_target"),
        # only where the inventory gave prices (docs/cost.md)
        *([_section(analysis, "cost")] if analysis.tables["cost"].rows else []),
        _section(analysis, "strategies"),
        _section(analysis, "memory"),
        "## Repeats, intervals and verdicts",
        "",
        *(f"- {line}" for line in verdict_lines(analysis.tables["comparisons"], analysis.tables["repeats"])),
        "",
        _section(analysis, "comparisons", heading=False),
        _section(analysis, "noise_floor", heading=False),
        _section(analysis, "repeats", heading=False),
        "## Step-time breakdown",
        "",
        f"![breakdown]({breakdown.name})",
        "",
        _section(analysis, "breakdown", heading=False),
        _section(analysis, "epoch_phases"),
        _section(analysis, "peers"),
        "## Averaging time per round",
        "",
        f"![averaging]({averaging.name})",
        "",
        _section(analysis, "averaging", heading=False),
        "## Effects (every experiment shown; repeats are spread, not averaged away)",
        "",
        *(f"![{path.stem}]({path.name})" for path in effects),
        "",
        *_unplotted_factors(effects),
        *(f"- {line}" for line in effect_verdicts(analysis.tables["effects"])),
        "",
        _section(analysis, "effects", heading=False),
        _section(analysis, "best_learning_rate"),
        "## Shaped links: where averaging takes over",
        "",
        f"![network]({network.name})",
        "",
        _section(analysis, "network_thresholds", heading=False),
        _section(analysis, "network", heading=False),
        *link_rate_lines(analysis.tables["link_rates"]),
        *cross_traffic_lines(analysis.tables["cross_traffic"], analysis.tables["cross_traffic_effect"]),
        "## Faults on purpose (throughput per peer; shaded: each fault's window, dashed: a kill)",
        "",
        *(f"![{path.stem}]({path.name})" for path in faults),
        "",
        _section(analysis, "faults", heading=False),
        "## Timeouts: which matchmaking_time and averaging_timeout to use (grids/timeouts.yml)",
        "",
        *(recommendation_lines(analysis.tables["timeouts"]) or ["No group tried more than one pair."]),
        "",
        _section(analysis, "timeouts", heading=False),
        _section(analysis, "preprocessing"),
        *(f"- {line}" for line in preprocessing_factors(analysis.tables["preprocessing"])),
        "",
        _section(analysis, "experiments"),
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report


def _unplotted_factors(plots: list[Path]) -> list[str]:
    """The effects section's line naming the factors without a plot (no runs differ in them alone)."""
    plotted = {path.stem.removeprefix("effect_") for path in plots}
    missing = [factor for factor in EFFECT_FACTORS if factor not in plotted]
    if not missing:
        return []
    return [f"No plot for {', '.join(missing)}: no runs differ in one of them alone.", ""]


def _section(analysis: Analysis, name: str, *, heading: bool = True) -> str:
    table = analysis.tables[name]
    title = f"## {table.title}\n\n" if heading else ""
    return f"{title}Table `{name}.csv`:\n\n{table.markdown()}\n"


def _received_compute_lines(experiments: list[Experiment]) -> list[str]:
    """report.md's line on the compute the dilated runs received against their calibration."""
    measured = [e for e in experiments if e.received_compute]
    if not measured:
        return []
    ratios = [float(e.received_compute["ratio"]) for e in measured]
    within = [e for e in measured if e.received_compute.get("within")]
    limits = ", ".join(
        f"{x:.0%}" for x in sorted({float(e.received_compute.get("limit") or 0) for e in measured})
    )
    unmeasured = sum(not e.received_compute for e in experiments if e.compute)
    return [
        "Compute received against the calibration (`received_compute` in `experiments.csv`, measured from "
        f"each run's steps): {len(within)} of {len(measured)} runs within ±{limits} (run ratios "
        f"{min(ratios):.3f}-{max(ratios):.3f}); {unmeasured} calibrated runs did not measure it.",
        "",
    ]


def _definitions() -> str:
    text = (DEFINITIONS or "").split("Definitions (also printed in report.md):", 1)[-1]
    return "\n".join(line[0:] for line in text.strip().splitlines())
