"""The study page's generated prose and the tables that compare editions (controller/report/study.py fills
them between the page's markers, as its tables).

- ``verdicts``: one sentence per headline comparison, its ratios, intervals and corrected verdicts, from the
  report's headline.csv;
- ``held``: how the repeats of the centre baseline and of the noise floor held across the edition's
  sittings: their runs, their sittings (a gap of more than ``SITTING_GAP`` starts a new one), their hours,
  the lowest and highest modelled samples/s and the spread (highest / lowest - 1) against the grid's limits;
- ``changed``: each headline comparison then (the first edition's runs, read with today's report and the
  second edition's family) and now, the verdict of each and whether it moved.

``typed_figures`` finds what a page's prose types by hand: a decimal figure outside the generated blocks that
is not a setting of the edition's grid.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.report.study import Edition

#: a run that starts more than this after the edition's run before it ended begins a new sitting
SITTING_GAP = datetime.timedelta(minutes=15)
#: the spread the centre baseline's repeats are held to (highest / lowest - 1 of modelled samples/s)
BASELINE_SPREAD_LIMIT = 0.05
#: the noise floor and its interval's upper end the edition is held to (docs/statistics.md)
NOISE_FLOOR_LIMIT, NOISE_FLOOR_UPPER_LIMIT = 0.08, 0.15


def _number(text: Any, digits: int = 3) -> str:
    from controller.report.study import number

    return number(None if text is None else str(text), digits)


def _interval(row: dict[str, Any]) -> str:
    if row.get("ci_low") in (None, "") or row.get("ci_high") in (None, ""):
        return "no interval"
    return f"{_number(row['ci_low'])}-{_number(row['ci_high'])}"


def verdicts_text(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """One bullet per headline comparison: each metric's ratio (above 1: the first side faster), its 95 %
    interval and its verdict after the family's correction."""
    from controller.report.study import read_csv

    by_comparison: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in read_csv(report / "headline.csv"):
        by_comparison[row["comparison"]].append(row)
    if not by_comparison:
        return "_no headline comparison yet_\n"
    lines = []
    for comparison, rows in by_comparison.items():
        parts = []
        for row in rows:
            if not row.get("ratio"):
                parts.append(f"{row['metric']}: {row['verdict']} ({row['runs']} against {row['against']})")
                continue
            mlperf = f"; MLPerf's reading {_number(row['mlperf_ratio'])}x" if row.get("mlperf_ratio") else ""
            parts.append(
                f"{row['metric']} {_number(row['ratio'])}x ({_interval(row)}), {row['verdict']}{mlperf}"
            )
        runs = rows[0]["runs"].split(" of ")[-1], rows[0]["against"].split(" of ")[-1]
        lines.append(f"- **{comparison}** ({runs[0]} runs against {runs[1]}): " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def _span(run_dir: Path) -> tuple[datetime.datetime, datetime.datetime] | None:
    """When a run trained: its peers' earliest first step and latest last step (steps.csv ``timestamp``)."""
    firsts, lasts = [], []
    for steps in run_dir.glob("*/steps.csv"):
        with open(steps, newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.DictReader(handle) if row.get("timestamp")]
        if rows:
            firsts.append(float(rows[0]["timestamp"]))
            lasts.append(float(rows[-1]["timestamp"]))
    if not firsts:
        return None
    start, end = (datetime.datetime.fromtimestamp(t, datetime.UTC) for t in (min(firsts), max(lasts)))
    return start, end


def sittings(spans: list[tuple[datetime.datetime, datetime.datetime]]) -> list[datetime.datetime]:
    """The first start of each sitting: a run that starts more than ``SITTING_GAP`` after the run before it
    ended begins a new one (within a sitting the grid starts the next run within minutes).

    >>> t, minute = datetime.datetime(2026, 12, 7, 12, 0), datetime.timedelta(minutes=1)
    >>> spans = [(t, t + 3 * minute), (t + 5 * minute, t + 9 * minute), (t + 60 * minute, t + 62 * minute)]
    >>> [s.strftime("%H:%M") for s in sittings(spans)]
    ['12:00', '13:00']
    """
    firsts: list[datetime.datetime] = []
    ended = None
    for start, end in sorted(spans):
        if ended is None or start - ended > SITTING_GAP:
            firsts.append(start)
        ended = end if ended is None else max(ended, end)
    return firsts


def held_rows(edition: Edition, report: Path) -> list[dict[str, str]]:
    """The centre baseline's and the noise floor's repeats in one edition: runs, sittings, hours, the
    lowest and highest modelled samples/s, the spread, and the limits the second edition is held to."""
    from controller.report.study import read_csv

    rows = {row["experiment_id"]: row for row in read_csv(report / "experiments.csv")}
    spans = {i: _span(edition.study_dir / i) for i in rows}
    all_sittings = sittings([span for span in spans.values() if span is not None])
    floor = read_csv(report / "noise_floor.csv")
    groups = {
        "centre baseline": [
            i
            for i, row in rows.items()
            if row["strategy"] == "baseline"
            and row["complete"] == "True"
            and float(row["batch_size"]) == 32
            and float(row["learning_rate"]) == 0.01
        ],
        "noise floor": [
            i for i, row in rows.items() if row["strategy"] == "solo" and row["complete"] == "True"
        ],
    }
    out = []
    for name, ids in groups.items():
        rates = [float(rows[i]["samples_per_second"]) for i in ids if rows[i].get("samples_per_second")]
        if not rates:
            continue
        begun = sorted(span[0] for i in ids if (span := spans[i]) is not None)
        held_in = {max(f for f in all_sittings if f <= s) for s in begun}
        spread = max(rates) / min(rates) - 1
        row = {
            "edition": edition.name,
            "repeats": name,
            "runs": str(len(rates)),
            "sittings": str(len(held_in)),
            "hours": " ".join(sorted({s.strftime("%H") for s in begun})),
            "low": f"{min(rates):.4g}",
            "high": f"{max(rates):.4g}",
            "spread": f"{spread:.3g}",
        }
        if name == "centre baseline":
            row["limit"] = f"spread {BASELINE_SPREAD_LIMIT:.0%}: " + (
                "within" if spread <= BASELINE_SPREAD_LIMIT else "outside"
            )
        elif floor:
            value, upper = float(floor[0]["floor"]), float(floor[0]["floor_ci_high"] or "nan")
            within = value <= NOISE_FLOOR_LIMIT and upper <= NOISE_FLOOR_UPPER_LIMIT
            row["spread"] = f"floor {value:.3g}, up to {upper:.3g}"
            row["limit"] = f"floor {NOISE_FLOOR_LIMIT:.0%}, up to {NOISE_FLOOR_UPPER_LIMIT:.0%}: " + (
                "within" if within else "outside"
            )
        out.append(row)
    return out


def held_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """The repeats held (``held_rows``) in this edition and, for the second, in the first beside it."""
    from controller.report.study import editions, markdown

    known = editions()
    rows = held_rows(edition, report)
    if edition.name != "first":
        rows = held_rows(known["first"], known["first"].report_dir) + rows
    return markdown(
        [
            ("edition", "edition"),
            ("repeats of", "repeats"),
            ("runs", "runs"),
            ("sittings", "sittings"),
            ("hours (UTC)", "hours"),
            ("samples/s, lowest", "low"),
            ("highest", "high"),
            ("spread (highest / lowest - 1)", "spread"),
            ("held to", "limit"),
        ],
        rows,
    )


def first_edition_family(first: Edition, second: Edition) -> list[dict[str, Any]]:
    """The second edition's headline family over the first edition's runs (its frozen grid's blocks), read
    with today's report: the same metrics, targets and correction."""
    from controller.grid.spec import load_grid
    from controller.report.data import load_experiments
    from controller.report.headline import headline_table as family
    from controller.report.metrics import loss_curve

    grid = dataclasses.replace(load_grid(first.grid), headline=load_grid(second.grid).headline)
    experiments = load_experiments(first.study_dir)
    curves = {e.experiment_id: loss_curve(e) for e in experiments}
    table = family(grid, experiments, curves)
    return [] if table is None else table.rows


def changed_table(edition: Edition, report: Path, labels: dict[str, dict[str, Any]]) -> str:
    """Each headline comparison and metric: the first edition's ratio, interval and verdict, the second's,
    and whether the verdict moved."""
    from controller.report.study import editions, markdown, read_csv

    known = editions()
    then = {(r["comparison"], r["metric"]): r for r in first_edition_family(known["first"], known["second"])}
    rows = []
    for now in read_csv(report / "headline.csv"):
        before = then.get((now["comparison"], now["metric"]), {})
        verdict_then, verdict_now = str(before.get("verdict", "–")), now["verdict"]
        rows.append(
            {
                "comparison": now["comparison"],
                "metric": now["metric"],
                "then": f"{_number(before.get('ratio'))}x ({_interval(before)}), {before.get('runs', '–')}"
                if before.get("ratio") not in (None, "")
                else "–",
                "verdict_then": verdict_then,
                "now": f"{_number(now['ratio'])}x ({_interval(now)}), {now['runs']}" if now["ratio"] else "–",
                "verdict_now": verdict_now,
                "moved": "same" if verdict_then.split(" (")[0] == verdict_now.split(" (")[0] else "moved",
            }
        )
    return markdown(
        [
            ("comparison", "comparison"),
            ("metric", "metric"),
            ("first edition", "then"),
            ("its verdict", "verdict_then"),
            ("second edition", "now"),
            ("its verdict", "verdict_now"),
            ("verdict", "moved"),
        ],
        rows,
    )


#: a decimal figure in prose, a ratio's ``x`` after it or not (not part of a name: ``lr0.01``, ``2.14.1``)
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\d.])")


def typed_figures(page: str, grid_text: str, marker: re.Pattern[str]) -> list[str]:
    """The decimal figures of ``page`` outside its generated blocks (``marker``) that ``grid_text`` does
    not hold: each one a figure typed by hand.

    >>> marker = re.compile(r"<!-- study:[a-z]+ -->.*?<!-- /study -->", re.DOTALL)
    >>> typed_figures("LR 0.01, 0.44x; <!-- study:x -->0.9<!-- /study --> lr0.01.png", "lr: 0.01", marker)
    ['0.44']
    """
    prose = marker.sub("", page)
    return sorted({figure for figure in DECIMAL.findall(prose) if figure not in grid_text})
