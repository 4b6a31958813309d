"""The study's published figures, generated from its committed results, edition by edition.

``python -m controller.report.study`` runs ``trainer report`` on each edition's committed results (the first:
``studies/thesis``, from ``trainer grid studies/thesis/grid.yml --results-dir studies/thesis``; the second:
``studies/second-edition``, from ``trainer grid grids/study.yml --results-dir studies/second-edition``) into
its ``report/`` and writes the tables of its page (docs/study-first-edition.md, docs/study.md) between their
markers (``<!-- study:NAME -->`` ... ``<!-- /study -->``) from that report's CSV files. ``--edition`` picks
one. ``--check`` does the same into a temporary directory and fails, naming each, where a committed CSV or a
table of a page differs from what the committed results give: no figure of the study is typed by hand.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from controller.report.study_text import changed_table, held_table, typed_figures, verdicts_text

REPO = Path(__file__).resolve().parents[2]
#: the report's options for the study (docs/study.md, "Targets"): a loss and a validation accuracy that every
#: centre-point run reaches, the baselines' and the 2 x 8, 4 x 4 and 8 x 2 Hivemind runs' alike, so that the
#: peers are compared on times, not on runs that never get there (the report's default accuracy target, the
#: best accuracy every baseline reaches, is reached by the baselines only in their last evaluation)
TARGET_LOSS = 1.0
TARGET_ACCURACY = 0.75
REPORT_ARGS = ("--target-loss", str(TARGET_LOSS), "--target-accuracy", str(TARGET_ACCURACY))
#: CSV files of the report that hold no figure of the study's runs (none now); every other one is compared
UNCOMPARED: tuple[str, ...] = ()
MARKER = re.compile(r"(<!-- study:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /study -->)", re.DOTALL)


@dataclass(frozen=True)
class Edition:
    """One edition of the study: its committed results, the grid they ran, its page, the report's options."""

    name: str
    study_dir: Path
    grid: Path
    doc: Path
    report_args: tuple[str, ...]

    @property
    def report_dir(self) -> Path:
        return self.study_dir / "report"


#: a table of a page: (the edition, its report's directory, each setting's label -> its settings) -> markdown
Table = Callable[[Edition, Path, dict[str, dict[str, Any]]], str]


def _headline_targets(grid: Path) -> tuple[str, ...]:
    """The report's options for the targets a grid's headline named before its runs."""
    from controller.grid.spec import load_grid

    headline = load_grid(grid).headline
    if headline is None:
        return ()
    accuracy = (
        () if headline.accuracy_target is None else ("--target-accuracy", str(headline.accuracy_target))
    )
    return ("--target-loss", str(headline.loss_target), *accuracy)


def editions() -> dict[str, Edition]:
    """The study's editions: the first (its grid kept as it ran, targets set after its runs) and the second
    (on the held scale model, its targets and comparisons named in its grid before its runs)."""
    first_dir, second_dir = REPO / "studies" / "thesis", REPO / "studies" / "second-edition"
    second_grid = REPO / "grids" / "study.yml"
    return {
        "first": Edition(
            "first", first_dir, first_dir / "grid.yml", REPO / "docs" / "study-first-edition.md", REPORT_ARGS
        ),
        "second": Edition(
            "second",
            second_dir,
            second_grid,
            REPO / "docs" / "study.md",
            _headline_targets(second_grid),
        ),
    }


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def number(text: str | None, digits: int = 3) -> str:
    """A CSV cell for a table: numbers to ``digits`` significant figures, empty as a dash.

    >>> number("0.123456"), number("1234.5"), number(""), number("needs 3 runs a side")
    ('0.123', '1.23e+03', '–', 'needs 3 runs a side')
    >>> number("12.0"), number("2"), number("nan"), number("1250"), number("1250.0")
    ('12', '2', '–', '1250', '1250')
    """
    if text in (None, ""):
        return "–"
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        return "–"
    if value.is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.{digits}g}"


def markdown(columns: list[tuple[str, str]], rows: list[dict[str, str]]) -> str:
    """A markdown table of ``rows`` with (heading, CSV column) ``columns``."""
    if not rows:
        return "_no runs yet_\n"
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(number(row.get(c)) for _, c in columns) + " |")
    return "\n".join(lines) + "\n"


#: how a page names a strategy
STRATEGY_NAMES = {
    "hivemind": "Hivemind",
    "ddp": "DDP",
    "zero": "ZeRO",
    "fsdp": "FSDP",
    "deepspeed": "DeepSpeed",
    "diloco": "DiLoCo",
    "solo": "solo",
}
#: the centre point of the study (its grid): every other setting changes one of these
CENTRE = {"batch_size": 32, "learning_rate": 0.01, "target_batch_size": 1250, "local_updates": False}
DEFAULT_MATCHMAKING = 5.0


def settings_by_label(study_dir: Path) -> dict[str, dict[str, Any]]:
    """Each setting's report label (the tables' ``setting`` and ``cell``) and its settings."""
    from controller.report.data import load_experiments

    return {e.label(): e.settings for e in load_experiments(study_dir) if not e.is_noise_floor}


def short(settings: dict[str, Any]) -> str:
    """A reader's name for a setting: its cluster, then what differs from the centre point.

    >>> short({"strategy": "baseline", "peers": 1, "batch_size": 32, "learning_rate": 0.01})
    'baseline 1 x 16'
    >>> short({"strategy": "hivemind", "peers": 2, "vcpus": 8, "batch_size": 64, "learning_rate": 0.01,
    ...        "target_batch_size": 1250, "local_updates": True, "matchmaking_time": 0.5})
    'Hivemind 2 x 8, BS 64, LU on, matchmaking 0.5 s'
    >>> short({"strategy": "ddp", "peers": 4, "vcpus": 4, "batch_size": 32, "learning_rate": 0.1})
    'DDP 4 x 4, LR 0.1'
    """
    strategy = settings.get("strategy")
    hivemind = strategy == "hivemind"
    if strategy == "baseline":
        name = "baseline 1 x 16"
    else:
        shown = STRATEGY_NAMES.get(strategy, str(strategy))
        name = f"{shown} {settings.get('peers')} x {settings.get('vcpus')}"
    parts = [name]
    if settings.get("batch_size") != CENTRE["batch_size"]:
        parts.append(f"BS {settings.get('batch_size')}")
    if settings.get("learning_rate") != CENTRE["learning_rate"]:
        parts.append(f"LR {settings.get('learning_rate'):g}")
    if hivemind and settings.get("target_batch_size") != CENTRE["target_batch_size"]:
        parts.append(f"TBS {settings.get('target_batch_size')}")
    if hivemind and settings.get("local_updates"):
        parts.append("LU on")
    matchmaking = settings.get("matchmaking_time")
    if hivemind and matchmaking is not None and float(matchmaking) != DEFAULT_MATCHMAKING:
        parts.append(f"matchmaking {float(matchmaking):g} s")
    return ", ".join(parts)


def is_centre(settings: dict[str, Any]) -> bool:
    """The centre point at any number of peers (the baseline's settings are only BS and LR)."""
    if not settings:
        return False
    keys: tuple[str, ...] = ("batch_size", "learning_rate")
    if settings.get("strategy") == "hivemind":
        keys += ("target_batch_size", "local_updates")
        if float(settings.get("matchmaking_time") or DEFAULT_MATCHMAKING) != DEFAULT_MATCHMAKING:
            return False
    return all(settings.get(key) == CENTRE[key] for key in keys)


def _named(
    rows: list[dict[str, str]], labels: dict[str, dict[str, Any]], column: str
) -> list[dict[str, str]]:
    """``rows`` with ``column`` (a report label) replaced by the setting's reader's name."""
    return [{**row, column: short(labels[row[column]])} for row in rows if row[column] in labels]


def _per_setting(rows: list[dict[str, str]], fields: list[str]) -> list[dict[str, str]]:
    """The mean of ``fields`` over each setting's repeats (rows of one setting share ``setting``)."""
    groups: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[row["setting"]].append(row)
    out = []
    for setting, group in groups.items():
        merged = {"setting": setting, "repeats": str(len(group))}
        for field in fields:
            values = [float(r[field]) for r in group if r.get(field) not in (None, "")]
            merged[field] = f"{mean(values):.6g}" if values else ""
        out.append(merged)
    return out


def peers_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    rows = [r for r in read_csv(report / "comparisons.csv") if is_centre(labels.get(r["setting"], {}))]
    rows.sort(key=lambda r: int(labels[r["setting"]]["peers"]))
    return markdown(
        [
            ("setting", "setting"),
            ("runs", "repeats"),
            ("throughput / baseline", "throughput_speedup"),
            ("95 % interval", "throughput_ci_low"),
            ("to", "throughput_ci_high"),
            ("verdict", "throughput_verdict"),
            ("time to the loss: speedup", "time_to_target_speedup"),
            ("verdict", "time_to_target_verdict"),
            ("reached", "time_to_target_reached"),
            ("time to the accuracy: speedup", "time_to_accuracy_speedup"),
            ("reached", "time_to_accuracy_reached"),
        ],
        _named(rows, labels, "setting"),
    )


def breakdown_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Per setting: where the step time goes (shares of the step, means over the runs), what bounds its runs
    (each run's bound, most often first; ``trainer report``'s diagnosis) with the averaging's two parts, the
    all-reduce itself (communication) and the waiting around it (coordination), and the knob the report
    names."""
    fields = ["step_ms", "data_share", "compute_share", "averaging_share", "optimizer_local_share"]
    rows = _per_setting(_named(read_csv(report / "breakdown.csv"), labels, "setting"), fields)
    diagnosed = _named(read_csv(report / "diagnosis.csv"), labels, "setting")
    parts = {r["setting"]: r for r in _per_setting(diagnosed, ["communication_share", "coordination_share"])}
    for row in rows:
        bounds = [r["bound"] for r in diagnosed if r["setting"] == row["setting"]]
        row["bound"] = ", ".join(sorted(set(bounds), key=lambda b: (-bounds.count(b), b)))
        row["knob"] = next((r["knob"] for r in diagnosed if r["setting"] == row["setting"]), "")
        row.update({k: v for k, v in parts.get(row["setting"], {}).items() if k.endswith("_share")})
    return markdown(
        [
            ("setting", "setting"),
            ("runs", "repeats"),
            ("step ms", "step_ms"),
            ("data", "data_share"),
            ("compute", "compute_share"),
            ("averaging", "averaging_share"),
            ("optimizer", "optimizer_local_share"),
            ("bound", "bound"),
            ("all-reduce", "communication_share"),
            ("waiting for a round", "coordination_share"),
            ("the knob the report names", "knob"),
        ],
        rows,
    )


#: the effects' metrics, in the order of their tables' columns
EFFECT_METRICS = (
    ("time to the loss, s", "time_to_target_seconds"),
    ("time to the accuracy, s", "time_to_accuracy_seconds"),
    ("samples/s", "samples_per_second"),
    ("final loss", "final_loss"),
)


def effect_cell(row: dict[str, str], runs: int) -> str:
    """One metric of one level: the median, then (not for the reference) the ratio to the reference, its 95 %
    interval and the verdict; how many runs it rests on where fewer than the level's runs reached a target.

    >>> effect_cell({"n": "3", "median": "22.7", "ratio": "", "verdict": ""}, 3)
    '22.7'
    >>> effect_cell({"n": "3", "median": "5.92", "ratio": "0.286", "ratio_ci_low": "0.189",
    ...              "ratio_ci_high": "0.432", "verdict": "lower beyond the noise"}, 3)
    '5.92; 0.286x (0.189-0.432), lower beyond the noise'
    >>> effect_cell({"n": "0", "median": "", "ratio": "", "verdict": "no data"}, 3)
    '– (0 of 3 runs reached it); no data'
    """
    text = number(row.get("median"))
    n = int(float(row.get("n") or 0))
    if n < runs:
        text += f" ({n} of {runs} runs reached it)"
    if row.get("ratio"):
        low, high = number(row.get("ratio_ci_low")), number(row.get("ratio_ci_high"))
        text += f"; {number(row['ratio'])}x ({low}-{high})"
    if row.get("verdict"):
        text += ("," if row.get("ratio") else ";") + f" {row['verdict']}"
    return text


def _effects(factor: str) -> Table:
    def table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
        metrics = {column for _, column in EFFECT_METRICS}
        levels: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
        for row in _named(read_csv(report / "effects.csv"), labels, "cell"):
            if row["factor"] == factor and row["metric"] in metrics:
                levels.setdefault((row["cell"], row["level"]), {})[row["metric"]] = row
        rows = []
        for (cell, level), by_metric in levels.items():
            runs = max(int(float(r.get("n") or 0)) for r in by_metric.values())
            out = {"cell": cell, "level": level, "runs": str(runs)}
            out.update({m: effect_cell(r, runs) for m, r in by_metric.items()})
            rows.append(out)
        return markdown(
            [("reference", "cell"), ("level", "level"), ("runs", "runs")]
            + [(heading, column) for heading, column in EFFECT_METRICS],
            rows,
        )

    return table


def prediction_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Per setting (gradient averaging): the granularity model's epoch (compute against matchmaking plus
    all-reduce at the link's bound), its predicted speedup and the measured one, means over the runs."""
    fields = ["compute_s", "communicate_s", "granularity", "predicted_speedup", "measured_speedup"]
    rows = _per_setting(_named(read_csv(report / "prediction.csv"), labels, "setting"), fields)
    return markdown(
        [
            ("setting", "setting"),
            ("runs", "repeats"),
            ("epoch's compute s", "compute_s"),
            ("its round s", "communicate_s"),
            ("granularity", "granularity"),
            ("predicted speedup", "predicted_speedup"),
            ("measured", "measured_speedup"),
        ],
        rows,
    )


def cost_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Machine time per block of the study's grid: spent on its complete runs (the grid's status file) and
    estimated for the rest (controller/grid/estimate.py), in hours."""
    from controller.grid.estimate import estimate
    from controller.grid.spec import load_grid
    from controller.grid.status import GridStatus, experiment_complete

    grid = load_grid(edition.grid)
    runs = list(grid.runs)
    status = GridStatus.load(edition.study_dir / f"grid-{grid.name}.status.json", grid)
    done = {run.experiment_id for run in runs if experiment_complete(edition.study_dir, run.experiment_id)}
    estimates = estimate(runs, status.runs, done)
    rows = []
    for block in (*grid.blocks, "all"):
        of_block = [run for run in runs if block in ("all", run.block)]
        ids = [run.experiment_id for run in of_block]
        spent = sum(estimates.measured.get(i, 0.0) for i in ids)
        left, unknown = estimates.total(of_block)
        rows.append(
            {
                "block": block,
                "runs": str(len(of_block)),
                "complete": str(sum(i in done for i in ids)),
                "spent_h": f"{spent / 3600:.3f}",
                "left_h": f"{left / 3600:.3f}",
                "unpriced": str(unknown),
            }
        )
    return markdown(
        [
            ("block", "block"),
            ("runs", "runs"),
            ("complete", "complete"),
            ("hours spent", "spent_h"),
            ("hours estimated for the rest", "left_h"),
            ("runs of a shape not run yet", "unpriced"),
        ],
        rows,
    )


def headline_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """The confirmatory family the grid named before its runs (``headline:``), as the report tests it: each
    comparison's ratio with its 95 % interval, Welch's p and its Holm-corrected p, and the verdict."""
    rows = read_csv(report / "headline.csv")
    for row in rows:
        row["interval"] = (
            f"{number(row.get('ci_low'))}-{number(row.get('ci_high'))}" if row.get("ratio") else ""
        )
    return markdown(
        [
            ("comparison", "comparison"),
            ("metric", "metric"),
            ("runs", "runs"),
            ("against", "against"),
            ("ratio", "ratio"),
            ("95 % interval", "interval"),
            ("p", "p_value"),
            ("p, corrected", "p_holm"),
            ("verdict", "verdict"),
        ],
        rows,
    )


def received_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Per setting: its complete runs and the compute they received against the calibration (1: the
    modelled machine's rate; experiment.json ``received_compute``), the lowest and the highest."""
    from controller.report.data import load_experiments

    name_of = {
        e.experiment_id: ("noise floor" if e.is_noise_floor else short(e.settings))
        for e in load_experiments(edition.study_dir)
    }
    groups: dict[str, list[float]] = defaultdict(list)
    for row in read_csv(report / "experiments.csv"):
        if row.get("received_compute") not in (None, "") and row["experiment_id"] in name_of:
            groups[name_of[row["experiment_id"]]].append(float(row["received_compute"]))
    rows = [
        {"setting": name, "runs": str(len(values)), "low": f"{min(values):.4g}", "high": f"{max(values):.4g}"}
        for name, values in sorted(groups.items())
    ]
    return markdown([("setting", "setting"), ("runs", "runs"), ("lowest", "low"), ("highest", "high")], rows)


def noise_floor_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """The noise floor: equal peers training alone, the spread between the runs' rates and its interval."""
    return markdown(
        [
            ("setting", "setting"),
            ("runs", "runs"),
            ("samples/s, lowest", "samples_per_second_min"),
            ("highest", "samples_per_second_max"),
            ("floor", "floor"),
            ("95 % interval", "floor_ci_low"),
            ("to", "floor_ci_high"),
            ("peers' spread", "peer_spread"),
        ],
        read_csv(report / "noise_floor.csv"),
    )


def best_learning_rate_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Each strategy at the learning rate that suits it, against the baseline at its own (the report's
    ``best_learning_rate.csv``: chosen from the same runs, so exploratory)."""
    rows = read_csv(report / "best_learning_rate.csv")
    for row in rows:
        row["cell"] = short(labels[row["cell"]]).split(", LR")[0] if row["cell"] in labels else row["cell"]
        row["interval"] = (
            f"{number(row.get('ratio_ci_low'))}-{number(row.get('ratio_ci_high'))}"
            if row.get("ratio")
            else ""
        )
    return markdown(
        [
            ("setting", "cell"),
            ("learning rates tried", "learning_rates"),
            ("best", "best_learning_rate"),
            ("chosen by", "chosen_by"),
            ("runs", "runs"),
            ("reached the loss", "reached"),
            ("time to the loss, s", "time_to_target_seconds"),
            ("against the baseline's best", "ratio"),
            ("95 % interval", "interval"),
            ("verdict", "verdict"),
        ],
        rows,
    )


TABLES: dict[str, Table] = {
    "verdicts": verdicts_text,
    "held": held_table,
    "changed": changed_table,
    "best_learning_rate": best_learning_rate_table,
    "headline": headline_table,
    "received": received_table,
    "noise_floor": noise_floor_table,
    "peers": peers_table,
    "breakdown": breakdown_table,
    "cost": cost_table,
    "prediction": prediction_table,
    "local_updates": _effects("local_updates"),
    "target_batch_size": _effects("target_batch_size"),
    "batch_size": _effects("batch_size"),
    "learning_rate": _effects("learning_rate"),
}


def _shown(path: Path) -> str:
    """A path as a message names it: from the repository's root where it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def render(edition: Edition, doc: str, report: Path) -> str:
    """``doc`` with every marked table generated from ``report``'s CSV files; an unknown name fails."""

    labels = settings_by_label(edition.study_dir)

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise ValueError(f"{_shown(edition.doc)}: unknown table {name!r} (known: {', '.join(TABLES)})")
        return match[1] + TABLES[name](edition, report, labels) + match[4]

    return MARKER.sub(fill, doc)


def run_report(edition: Edition, out: Path) -> None:
    from controller.report.command import configure_parser, main

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args([str(edition.study_dir), "--out", str(out), *edition.report_args])
    if main(args) != 0:
        raise SystemExit(f"trainer report {edition.study_dir} failed")


def differences(edition: Edition, generated: Path) -> list[str]:
    """What the committed report and the edition's page hold that ``generated`` (a fresh report) does not."""
    problems = []
    report_dir = edition.report_dir
    committed = {p.name for p in report_dir.glob("*.csv")} - set(UNCOMPARED)
    fresh = {p.name for p in generated.glob("*.csv")} - set(UNCOMPARED)
    for name in sorted(committed ^ fresh):
        where = "committed only" if name in committed else "generated only"
        problems.append(f"{report_dir.relative_to(REPO)}/{name}: {where}")
    for name in sorted(committed & fresh):
        if (report_dir / name).read_text() != (generated / name).read_text():
            problems.append(f"{report_dir.relative_to(REPO)}/{name}: differs from the committed results'")
    doc = edition.doc.read_text()
    if render(edition, doc, generated) != doc:
        problems.append(f"{_shown(edition.doc)}: a table differs from the committed results' report")
    typed = typed_figures(doc, edition.grid.read_text(), MARKER)
    if typed and edition.name != "first":
        problems.append(
            f"{_shown(edition.doc)}: figures typed outside the generated blocks, not settings of "
            f"{_shown(edition.grid)}: {', '.join(typed)}"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail where a published figure is stale")
    parser.add_argument("--edition", choices=("first", "second"), help="one edition (default: both)")
    args = parser.parse_args(argv)
    chosen = [edition for name, edition in editions().items() if args.edition in (None, name)]
    if args.check:
        problems = []
        for edition in chosen:
            with tempfile.TemporaryDirectory() as tmp:
                run_report(edition, Path(tmp))
                problems += differences(edition, Path(tmp))
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for edition in chosen:
        run_report(edition, edition.report_dir)
        edition.doc.write_text(render(edition, edition.doc.read_text(), edition.report_dir))
        print(
            f"wrote {edition.report_dir.relative_to(REPO)} and the tables of {edition.doc.relative_to(REPO)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
