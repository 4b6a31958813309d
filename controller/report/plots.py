"""The report's PNG plots (matplotlib, Agg backend), drawn from an Analysis (report/analysis.py builds it)."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from controller.report.breakdown import AVERAGING_PARTS, BREAKDOWN_PARTS  # noqa: E402
from controller.report.effects import EFFECT_FACTORS, EFFECT_METRICS  # noqa: E402
from controller.report.faults import fault_windows  # noqa: E402
from controller.report.metrics import Analysis, bandwidth_bound, latency_seconds  # noqa: E402

STRATEGY_COLOURS = {
    "baseline": "#333333",
    "hivemind": "#dd8452",
    "ddp": "#4c72b0",
    "zero": "#8172b2",
    "fsdp": "#937860",
    "deepspeed": "#da8bc3",
    "diloco": "#c44e52",
    "solo": "#55a868",
}


def strategy_colour(strategy: str) -> str:
    """A strategy's colour; DeepSpeed's stages (``deepspeed-z2``) share DeepSpeed's.

    >>> strategy_colour("deepspeed-z3") == STRATEGY_COLOURS["deepspeed"]
    True
    """
    return STRATEGY_COLOURS.get(strategy.partition("-z")[0], "#999999")


PART_COLOURS = {
    "data": "#4c72b0",
    "compute": "#55a868",
    "averaging": "#c44e52",
    # the averaging part, split: reds from dark to light
    "matchmaking": "#8c2d2f",
    "allreduce": "#c44e52",
    "background_wait": "#e3897f",
    "averaging_other": "#f2c4bd",
    "optimizer_local": "#8172b2",
    "other": "#bbbbbb",
}


#: the breakdown's bars: its parts, the averaging part drawn as its split (AVERAGING_PARTS sum to it)
BAR_PARTS = tuple(
    part for top in BREAKDOWN_PARTS for part in (AVERAGING_PARTS if top == "averaging" else (top,))
)


def _save(figure: Any, path: Path, *, bottom: float = 0.0) -> Path:
    """Lay out and write the figure; ``bottom``: the share of its height kept free (a legend below)."""
    figure.tight_layout(rect=(0, bottom, 1, 1))
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _no_data(axis: Any, text: str = "no data") -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes, color="grey")


#: points of the common time axis a setting's repeats are read at, for their median and range
REPEAT_GRID_POINTS = 200


def repeats_band(
    curves: list[tuple[list[float], list[float]]], points: int = REPEAT_GRID_POINTS
) -> tuple[list[float], list[float], list[float], list[float]]:
    """(times, median, lowest, highest) of several runs' loss curves on one time axis: at each time, every
    run still training (started, not yet ended) gives its last loss at or before it.

    >>> times, median, low, high = repeats_band([([1.0, 2.0], [3.0, 2.0]), ([1.0, 3.0], [2.0, 1.0])], 3)
    >>> times, median, low, high
    ([1.0, 2.0, 3.0], [2.5, 2.0, 1.0], [2.0, 2.0, 1.0], [3.0, 2.0, 1.0])
    """
    curves = [(t, loss) for t, loss in curves if t]
    if not curves:
        return [], [], [], []
    start, end = min(t[0] for t, _ in curves), max(t[-1] for t, _ in curves)
    grid = [start + (end - start) * i / max(1, points - 1) for i in range(points)]
    times, median, low, high = [], [], [], []
    cursors = [0] * len(curves)
    for moment in grid:
        values = []
        for index, (t, loss) in enumerate(curves):
            while cursors[index] + 1 < len(t) and t[cursors[index] + 1] <= moment:
                cursors[index] += 1
            if t[0] <= moment <= t[-1]:
                values.append(loss[cursors[index]])
        if values:
            times.append(moment)
            median.append(statistics.median(values))
            low.append(min(values))
            high.append(max(values))
    return times, median, low, high


def loss_plots(analysis: Analysis, out: Path) -> list[Path]:
    """One plot per (model, dataset, batch size, LR): each setting's training loss over modelled time on the
    training clock, the baseline black; a setting run once is its line (its faults marked), one repeated is
    its repeats' median with their range shaded."""
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for e in analysis.experiments:
        if not e.is_noise_floor:
            groups[e.comparison_key()].append(e)
    paths = []
    for key in sorted(groups, key=str):
        model, dataset, batch_size, learning_rate = key
        figure, axis = plt.subplots(figsize=(8, 4.5))
        settings: dict[str, list[Any]] = defaultdict(list)
        for e in sorted(groups[key], key=lambda e: (not e.is_baseline, e.experiment_id)):
            settings[e.label()].append(e)
        singles = [(runs[0].label(), runs[0].experiment_id) for runs in settings.values() if len(runs) == 1]
        single_labels = dict(zip([i for _, i in singles], distinct_labels(singles), strict=True))
        for setting, runs in settings.items():
            baseline = runs[0].is_baseline
            style = {"color": "black"} if baseline else {}
            if len(runs) == 1:
                e = runs[0]
                times, losses = analysis.curves[e.experiment_id]
                (line,) = axis.plot(
                    times, losses, label=single_labels[e.experiment_id], linewidth=1.2, **style
                )
                _mark_faults(axis, e, line.get_color())
                continue
            times, median, low, high = repeats_band([analysis.curves[e.experiment_id] for e in runs])
            (line,) = axis.plot(times, median, label=f"{setting} ({len(runs)} runs)", linewidth=1.4, **style)
            axis.fill_between(times, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
        targets = {analysis.targets[e.experiment_id] for e in groups[key]} - {None}
        for target in targets:
            axis.axhline(target, color="grey", linestyle=":", linewidth=1)
        axis.set_xscale("symlog", linthresh=10.0)
        axis.set_xlabel("modelled training time (s; validation left out, log scale above 10 s)")
        axis.set_ylabel("training loss (smoothed)")
        axis.set_title(
            f"{model} / {dataset}, batch size {batch_size}, LR {learning_rate} (repeats: median and range)"
        )
        axis.legend(fontsize=7, ncol=2)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"loss_{model}_{dataset}_bs{batch_size}_lr{learning_rate}")
        paths.append(_save(figure, out / f"{name}.png"))
    return paths


def headline_plot(analysis: Analysis, out: Path) -> Path | None:
    """headline.png: each headline comparison's ratio with its 95 % interval, one panel per metric, on a log
    axis around 1 (no difference); filled where the corrected test decided it. None without a headline."""
    table = analysis.tables.get("headline")
    if table is None or not table.rows:
        return None
    metrics = list(dict.fromkeys(row["metric"] for row in table.rows))
    comparisons = list(dict.fromkeys(row["comparison"] for row in table.rows))
    figure, axes = plt.subplots(
        1, len(metrics), figsize=(4 * len(metrics), 0.45 * len(comparisons) + 1.6), sharey=True, squeeze=False
    )
    for axis, metric in zip(axes[0], metrics, strict=True):
        for row in (row for row in table.rows if row["metric"] == metric):
            if row["ratio"] is None:
                continue
            y = len(comparisons) - 1 - comparisons.index(row["comparison"])
            decided = str(row["verdict"]).startswith(("faster", "slower"))
            if row["ci_low"] is not None and row["ci_high"] is not None:
                axis.hlines(y, row["ci_low"], row["ci_high"], color="#4c72b0", linewidth=2)
            axis.plot(
                [row["ratio"]], [y], "o", color="#4c72b0", markerfacecolor="#4c72b0" if decided else "white"
            )
        axis.axvline(1.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xscale("log")
        axis.set_title(metric, fontsize=9)
        axis.set_xlabel("ratio (above 1: faster)")
    axes[0][0].set_yticks(range(len(comparisons)), list(reversed(comparisons)), fontsize=8)
    figure.suptitle(
        "The headline comparisons: ratio and 95 % interval (filled: decided after the correction)",
        fontsize=10,
    )
    return _save(figure, out / "headline.png")


def _mark_faults(axis: Any, e: Any, colour: str) -> None:
    """Shade each applied fault's window (a line where it has none: a kill) and name it at the top."""
    for window in fault_windows(e):
        start, end = window["start"], window["end"]
        if end is not None and end > start:
            axis.axvspan(start, end, color=colour, alpha=0.12)
        else:
            axis.axvline(start, color=colour, linestyle="--", linewidth=1)
        axis.annotate(
            window.get("spec", window.get("kind", "fault")),
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=6,
            color=colour,
        )


def throughput_series(steps: list[dict[str, Any]], window: float) -> tuple[list[float], list[float]]:
    """(window end, samples/s over the window) of one peer's steps, in windows of ``window`` seconds."""
    buckets: dict[int, float] = defaultdict(float)
    for row in steps:
        if row.get("wall_seconds") is not None:
            buckets[int(row["wall_seconds"] // window)] += float(row.get("samples") or 0)
    if not buckets:
        return [], []
    indices = range(min(buckets), max(buckets) + 1)
    return [(i + 1) * window for i in indices], [buckets.get(i, 0.0) / window for i in indices]


def fault_plots(analysis: Analysis, out: Path) -> list[Path]:
    """Per experiment with faults: every peer's throughput over time, the faults' windows shaded."""
    paths = []
    for e in analysis.experiments:
        if not e.faults:
            continue
        figure, axis = plt.subplots(figsize=(8, 4))
        ends = [row["wall_seconds"] for peer in e.peers for row in peer.steps[-1:] if row.get("wall_seconds")]
        window = max(1.0, (max(ends) if ends else 60.0) / 60)
        for peer in e.peers:
            times, rates = throughput_series(peer.steps, window)
            axis.step(times, rates, where="post", linewidth=1, label=peer.name)
        _mark_faults(axis, e, "#c44e52")
        axis.set_xlabel("wall time since start barrier (s)")
        axis.set_ylabel(f"samples/s ({window:.0f} s windows)")
        axis.set_title(f"{e.experiment_id}: throughput per peer and the faults")
        axis.legend(fontsize=7, ncol=4)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"faults_{e.experiment_id}")
        paths.append(_save(figure, out / f"{name}.png"))
    return paths


REPEAT_SUFFIX = re.compile(r"-(r\d+)$")  # a grid run's repeat at the end of its id


def distinct_labels(runs: list[tuple[str, str]]) -> list[str]:
    """Each run's setting label, with a short part of its id only where two runs share a label: the repeat
    (``r2``) where the ids end in one, else the shortest id ending that tells them apart.

    >>> distinct_labels([("4p tbs512", "hivemind-a1-r1"), ("4p tbs512", "hivemind-a1-r2"), ("baseline", "b")])
    ['4p tbs512 (r1)', '4p tbs512 (r2)', 'baseline']
    >>> distinct_labels([("x", "run-20261126T0701Z"), ("x", "run-20261126T0755Z")])
    ['x (701Z)', 'x (755Z)']
    """
    groups: dict[str, list[str]] = {}
    for label, run_id in runs:
        groups.setdefault(label, []).append(run_id)
    labels = []
    for label, run_id in runs:
        ids = groups[label]
        if len(ids) == 1:
            labels.append(label)
            continue
        repeats = {i: m.group(1) for i in ids if (m := REPEAT_SUFFIX.search(i))}
        if len(repeats) == len(ids) and len(set(repeats.values())) == len(ids):
            labels.append(f"{label} ({repeats[run_id]})")
            continue
        width = next(w for w in range(4, max(map(len, ids)) + 2) if len({i[-w:] for i in ids}) == len(ids))
        labels.append(f"{label} ({run_id[-width:]})")
    return labels


def breakdown_plot(analysis: Analysis, out: Path) -> Path:
    """Stacked bars per experiment: mean ms per step (left) and shares of step time (right)."""
    rows = analysis.tables["breakdown"].rows
    figure, (absolute, shares) = plt.subplots(1, 2, figsize=(12, 0.4 * max(len(rows), 4) + 1.5))
    labels = distinct_labels([(row["setting"], row["experiment_id"]) for row in rows])
    for axis, suffix, xlabel in ((absolute, "_ms", "ms per step"), (shares, "_share", "share of step time")):
        left = [0.0] * len(rows)
        for part in BAR_PARTS:
            values = [max(row[f"{part}{suffix}"] or 0.0, 0.0) for row in rows]
            axis.barh(labels, values, left=left, color=PART_COLOURS[part], label=part)
            left = [a + b for a, b in zip(left, values, strict=True)]
        axis.set_xlabel(xlabel)
        axis.invert_yaxis()
        if not rows:
            _no_data(axis)
    shares.set_yticklabels([])
    handles, names = absolute.get_legend_handles_labels()  # below the bars, never on them
    figure.legend(handles, names, fontsize=8, loc="lower center", ncol=len(BAR_PARTS), frameon=False)
    figure.suptitle("Step-time breakdown: data loading / compute / averaging (matchmaking, all-reduce, ...)")
    # 0.35 in below the axes' labels for the legend
    return _save(figure, out / "breakdown.png", bottom=0.35 / figure.get_figheight())


def averaging_plot(analysis: Analysis, out: Path) -> Path:
    """Per peer count: every ok round's all-reduce time (dots), its matchmaking (crosses), the lower bound."""
    figure, axis = plt.subplots(figsize=(8, 4.5))
    bounds: dict[int, float] = {}
    drawn = False
    for e in analysis.experiments:
        rounds = [r for r in analysis.round_samples.get(e.experiment_id, []) if r.get("outcome") == "ok"]
        allreduce = [r["allreduce_seconds"] for r in rounds if r.get("allreduce_seconds") is not None]
        matchmaking = [r["matchmaking_seconds"] for r in rounds if r.get("matchmaking_seconds") is not None]
        x = e.peer_count
        jitter = [x + 0.15 * ((i % 7) - 3) / 3 for i in range(max(len(allreduce), len(matchmaking)))]
        if allreduce:
            axis.scatter(jitter[: len(allreduce)], allreduce, s=8, alpha=0.5, color="#c44e52")
            drawn = True
        if matchmaking:
            axis.scatter(
                jitter[: len(matchmaking)], matchmaking, s=10, marker="x", alpha=0.4, color="#4c72b0"
            )
        m_bytes = analysis.model_bytes.get(str(e.settings.get("model")))
        bandwidth = analysis.bandwidth or e.bandwidth_bytes_per_second
        if m_bytes and bandwidth and x > 1:
            bounds[x] = bandwidth_bound(x, m_bytes, bandwidth, latency_seconds(e))
    for x, bound in sorted(bounds.items()):
        axis.hlines(bound, x - 0.4, x + 0.4, color="black", linewidth=2)
    axis.scatter([], [], s=8, color="#c44e52", label="all-reduce per round")
    axis.scatter([], [], s=10, marker="x", color="#4c72b0", label="matchmaking per round")
    if bounds:
        axis.plot([], [], color="black", linewidth=2, label="lower bound 2α + 2(n−1)/n·M/B")
    else:
        axis.set_title("no bandwidth given (--bandwidth): lower bound not drawn", fontsize=9)
    if not drawn:
        _no_data(axis, "no averaging rounds")
    peer_counts = sorted({e.peer_count for e in analysis.experiments if not e.is_baseline})
    axis.set_xticks(peer_counts or [2])
    axis.set_xlim(min(peer_counts or [2]) - 0.6, max(peer_counts or [2]) + 0.6)
    axis.set_xlabel("peers")
    axis.set_ylabel("seconds (log)")
    if drawn:
        axis.set_yscale("log")
    axis.legend(fontsize=8)
    return _save(figure, out / "averaging.png")


def network_plot(analysis: Analysis, out: Path) -> Path:
    """Per setting and peers: the averaging share (solid) and compute share (dashed) against the link rate."""
    rows = analysis.tables["network"].rows
    figure, axis = plt.subplots(figsize=(8, 4.5))
    series: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        series[row["setting"].rsplit(" ", 1)[0], row["peers"]].append(row)
    for (setting, _), members in sorted(series.items(), key=lambda item: (item[0][1], item[0][0])):
        members.sort(key=lambda row: row["bandwidth_mbit"])
        rates = [row["bandwidth_mbit"] for row in members]
        (line,) = axis.plot(
            rates, [row["averaging_share"] for row in members], "-o", label=f"{setting}: averaging"
        )
        axis.plot(rates, [row["compute_share"] for row in members], "--", color=line.get_color(), alpha=0.6)
        bound = [row for row in members if row["bound"] == "averaging"]
        axis.scatter(
            [row["bandwidth_mbit"] for row in bound],
            [row["averaging_share"] for row in bound],
            s=90,
            facecolors="none",
            edgecolors="black",
        )
    if rows:
        axis.scatter([], [], s=90, facecolors="none", edgecolors="black", label="communication-bound")
        axis.plot([], [], "--", color="grey", label="compute share")
        axis.set_xscale("log")
        axis.legend(fontsize=7)
    else:
        _no_data(axis, "no Hivemind runs with bandwidth_mbit")
    axis.set_ylim(0, 1)
    axis.set_xlabel("link rate per peer (Mbit/s, log)")
    axis.set_ylabel("share of step time")
    axis.set_title("Averaging share of step time against the link rate", fontsize=10)
    return _save(figure, out / "network.png")


def effect_plots(analysis: Analysis, out: Path) -> list[Path]:
    """Per factor: each metric against the factor's levels, every experiment a dot, the median a bar. Only
    the factors that some runs differ in alone, and of those only the metrics their runs measured: a figure
    of empty panels said nothing that the effects table does not, and its layout cost about 0.4 s of CPU per
    factor (the report names the factors it has no plot for)."""
    rows = analysis.tables["effects"].rows
    paths = []
    for factor in EFFECT_FACTORS:
        metrics = [
            metric
            for metric in EFFECT_METRICS
            if any(row["n"] for row in rows if row["factor"] == factor and row["metric"] == metric)
        ]
        if not metrics:
            continue
        figure, grid = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.5), squeeze=False)
        axes = grid[0]
        for axis, metric in zip(axes, metrics, strict=True):
            selected = [row for row in rows if row["factor"] == factor and row["metric"] == metric]
            levels = list(dict.fromkeys(str(row["level"]) for row in selected))
            plotted: list[float] = []
            for row in selected:
                position = levels.index(str(row["level"])) + (-0.2 if row["strategy"] == "baseline" else 0.2)
                values = row["points"]
                plotted += values
                xs = [position + 0.05 * ((i % 5) - 2) for i in range(len(values))]
                axis.scatter(xs, values, s=14, alpha=0.7, color=strategy_colour(row["strategy"]))
                if row["median"] is not None:
                    axis.hlines(row["median"], position - 0.15, position + 0.15, color="black")
                if row["ci_low"] is not None:  # the 95 % interval of the mean (from 2 repeats)
                    axis.vlines(position + 0.17, row["ci_low"], row["ci_high"], color="black", linewidth=2)
            if max(plotted) - min(plotted) <= 0.01 * abs(statistics.median(plotted)):
                # one value (or nearly): show it within +-10 %, not a zoom into rounding noise
                middle = statistics.median(plotted)
                axis.set_ylim(middle - 0.1 * abs(middle) - 1e-9, middle + 0.1 * abs(middle) + 1e-9)
            axis.scatter([], [], s=14, color=STRATEGY_COLOURS["baseline"], label="baseline")
            axis.scatter([], [], s=14, color=STRATEGY_COLOURS["hivemind"], label="hivemind")
            axis.set_xticks(range(len(levels)), levels)
            axis.set_xlim(-0.6, len(levels) - 0.4)
            axis.set_xlabel(factor)
            axis.set_title(metric, fontsize=9)
            axis.ticklabel_format(axis="y", useOffset=False)  # one run: no "1e-5+2.86e2" offset
        axes[0].legend(fontsize=7)
        figure.suptitle(
            f"Effect of {factor} (a dot per experiment, bar: median, vertical: 95 % interval of the mean)",
            fontsize=10,
        )
        paths.append(_save(figure, out / f"effect_{factor}.png"))
    return paths


def target_curve_plot(analysis: Analysis, out: Path) -> Path | None:
    """target_curves.png: each setting's median time to every loss and accuracy target (table
    ``target_curves``, controller/report/targets.py), its repeats' range shaded; None without the table."""
    table = analysis.tables.get("target_curves")
    if table is None or not table.rows:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(12, 7))
    colours: dict[str, Any] = {}
    for axis, metric, label in ((axes[0], "loss", "loss target"), (axes[1], "accuracy", "accuracy target")):
        rows = [row for row in table.rows if row["metric"] == metric]
        by_setting: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_setting[row["setting"]].append(row)
        for setting, points in sorted(by_setting.items()):
            reached = [p for p in points if p["median_seconds"] is not None]
            if not reached:
                continue
            targets = [p["target"] for p in reached]
            style = {"color": colours[setting]} if setting in colours else {}
            (line,) = axis.plot(
                targets, [p["median_seconds"] for p in reached], marker=".", label=setting, **style
            )
            colours[setting] = line.get_color()
            axis.fill_between(
                targets,
                [p["min_seconds"] for p in reached],
                [p["max_seconds"] for p in reached],
                color=line.get_color(),
                alpha=0.15,
            )
        if not rows:
            _no_data(axis)
        if metric == "loss":
            axis.invert_xaxis()  # tighter targets to the right
        axis.set_yscale("log")
        axis.set_xlabel(label)
        axis.set_ylabel("time to target (modelled s, median and range)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=7, ncol=2, loc="lower center")
    figure.suptitle("Time to target against the target, per setting")
    return _save(figure, out / "target_curves.png", bottom=0.3)
