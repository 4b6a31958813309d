"""controller.report.intervals: repeats, intervals and verdicts, on set numbers."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from controller.report.data import Experiment, distinguish_labels
from controller.report.intervals import comparisons_table, repeats_table, verdict_lines

SETTING = {"model": "smallcnn", "dataset": "synthetic", "batch_size": 32, "learning_rate": 0.01, "vcpus": 1}


def _runs(prefix: str, strategy: str, rates: list[float], times: list[float | None], **settings):
    experiments, rows = [], {}
    for index, (rate, time) in enumerate(zip(rates, times, strict=True)):
        name = f"{prefix}-r{index + 1}"
        experiments.append(Experiment(name, Path(name), {**SETTING, "strategy": strategy, **settings}, True))
        rows[name] = {"samples_per_second": rate, "time_to_target_seconds": time}
    return experiments, rows


def _report(*groups):
    experiments = [e for group, _ in groups for e in group]
    rows = {k: v for _, group_rows in groups for k, v in group_rows.items()}
    return repeats_table(experiments, rows), comparisons_table(experiments, rows)


def test_a_clear_difference_is_beyond_the_noise_and_an_overlap_within_it():
    base = _runs("base", "baseline", [100, 102, 98, 101, 99], [60, 61, 59, 60, 62], peers=1)
    fast = _runs("fast", "hivemind", [150, 155, 148, 152, 151], [61, 58, 63, 57, 62], peers=2)
    repeats, comparisons = _report(base, fast)
    (row,) = comparisons.rows
    assert row["repeats"] == 5 and row["baseline_repeats"] == 5
    geometric = math.exp(statistics.fmean(map(math.log, [150, 155, 148, 152, 151])))
    assert row["throughput_speedup"] == pytest.approx(
        geometric / math.exp(statistics.fmean(map(math.log, [100, 102, 98, 101, 99])))
    )
    assert 1 < row["throughput_ci_low"] < row["throughput_speedup"] < row["throughput_ci_high"]
    assert row["throughput_verdict"] == "faster beyond the noise"
    # equal times to target: the interval holds 1
    assert row["time_to_target_ci_low"] < 1 < row["time_to_target_ci_high"]
    assert row["time_to_target_verdict"] == "within the noise"
    by_setting = {r["setting"]: r for r in repeats.rows}
    baseline = by_setting[base[0][0].label()]
    assert baseline["repeats"] == 5 and baseline["samples_per_second_median"] == 100
    assert (baseline["samples_per_second_min"], baseline["samples_per_second_max"]) == (98, 102)
    assert baseline["samples_per_second_trimmed_mean"] == pytest.approx((99 + 100 + 101) / 3)  # MLPerf's
    assert 98 <= baseline["samples_per_second_ci_low"] < 100 < baseline["samples_per_second_ci_high"] <= 102
    lines = verdict_lines(comparisons, repeats)
    assert any(
        "samples/s: 1.51x (95 % interval" in line and "faster beyond the noise" in line for line in lines
    )
    assert not any("Intervals need repeats" in line for line in lines)


def test_single_runs_get_no_interval_and_the_report_says_repeats_are_needed():
    base = _runs("base", "baseline", [100], [60], peers=1)
    single = _runs("hm", "hivemind", [120], [None], peers=2)  # never reached the target
    repeats, comparisons = _report(base, single)
    (row,) = comparisons.rows
    assert row["throughput_speedup"] == pytest.approx(1.2) and row["throughput_ci_low"] is None
    assert row["throughput_verdict"] == "needs 2 runs a side"
    # the run that never reached the target is counted, not dropped: 0 of 1 against 1 of 1
    assert row["time_to_target_speedup"] is None and row["time_to_target_reached"] == "0/1 vs 1/1"
    assert row["time_to_target_verdict"] == "undecided: 0 of 1 vs 1 of 1 reached"
    assert all(r["samples_per_second_ci_low"] is None and r["samples_per_second_trimmed_mean"] is None
               for r in repeats.rows)  # fmt: skip
    lines = verdict_lines(comparisons, repeats)
    assert lines[0].startswith("Intervals need 2 runs a side: every setting here ran once")
    assert "1.20x, needs 2 runs a side (1 vs 1 runs)" in lines[1]


def test_a_setting_without_matching_baselines_is_not_compared():
    base = _runs("base", "baseline", [100, 101], [60, 61], peers=1, batch_size=64)
    other = _runs("hm", "hivemind", [120, 121], [50, 51], peers=2)
    _, comparisons = _report(base, other)
    assert comparisons.rows == []
    repeats, comparisons = _report(base, other)
    assert verdict_lines(comparisons, repeats) == [
        "No comparison: no baseline shares a setting's model, data, batch size and LR."
    ]


def test_two_against_two_gives_the_range_of_the_t_interval_not_min_over_max():
    """The percentile bootstrap gave [min(a)/max(b), max(a)/min(b)] at 2 vs 2 and called it beyond the noise;
    Welch's interval on logarithms at 2 vs 2 is wide enough to hold its 95 % (docs/statistics.md)."""
    base = _runs("base", "baseline", [100, 104], [60, 61], peers=1)
    hm = _runs("hm", "hivemind", [108, 112], [58, 57], peers=2)
    _, comparisons = _report(base, hm)
    (row,) = comparisons.rows
    # an interval from the ranges of the means would be 108/104-112/100 = 1.04-1.12: "faster beyond the noise"
    assert row["throughput_ci_low"] < 1 < row["throughput_ci_high"], row
    assert row["throughput_verdict"] == "within the noise"
    assert row["throughput_runs_needed"] > 2
    lines = verdict_lines(comparisons, repeats_table(*_merge(base, hm)))
    assert any("needs about" in line and "runs a side" in line for line in lines), lines


def test_times_some_run_never_reached_are_counted_and_decided_only_by_the_data():
    base = _runs("base", "baseline", [100] * 4, [100.0, 105.0, None, 103.0], peers=1)
    hm = _runs("hm", "hivemind", [120] * 4, [50.0, 52.0, 51.0, 49.0], peers=2)
    for e in base[0]:
        base[1][e.experiment_id]["wall_seconds"] = 120.0
    for e in hm[0]:
        hm[1][e.experiment_id]["wall_seconds"] = 60.0
    repeats, comparisons = _report(base, hm)
    (row,) = comparisons.rows
    assert row["time_to_target_speedup"] is None and row["time_to_target_reached"] == "4/4 vs 3/4"
    # all four Hivemind runs got there before any baseline did: 2 / C(8, 4) = 3 % of the orderings
    assert row["time_to_target_verdict"] == "faster beyond the noise (4 of 4 vs 3 of 4 reached)"
    by_setting = {r["strategy"]: r for r in repeats.rows}
    assert by_setting["baseline"]["time_to_target_seconds_reached"] == 3
    assert by_setting["baseline"]["time_to_target_seconds_ci_low"] is None  # not from the 3 that reached
    # 2 vs 2 with the same separation is not enough: 2 / C(4, 2) = 33 %
    small = _report(
        _runs("b", "baseline", [1, 1], [None, 100.0], peers=1),
        _runs("h", "hivemind", [1, 1], [5.0, 6.0], peers=2),
    )
    assert small[1].rows[0]["time_to_target_verdict"].startswith("undecided")


def test_settings_that_differ_in_any_defining_variable_are_not_repeats():
    """ZeRO stages and DiLoCo's H, but also latency or the seed-free rest: separate rows, separate labels."""
    rows = {}
    experiments = []
    for name, settings in {
        "z1": {"strategy": "deepspeed", "zero_stage": 1},
        "z2": {"strategy": "deepspeed", "zero_stage": 2},
        "z2-unset": {"strategy": "deepspeed"},  # the default stage: a repeat of z2
        "h5": {"strategy": "diloco", "sync_every": 5},
        "h25": {"strategy": "diloco", "sync_every": 25},
        "h25-m": {"strategy": "diloco", "sync_every": 25, "outer_momentum": 0.5},
        "hm-a": {"strategy": "hivemind", "seed": 1},
        "hm-b": {"strategy": "hivemind", "seed": 2},  # another seed: a repeat
        "hm-lat": {"strategy": "hivemind", "latency_ms": 20.0},
    }.items():
        experiments.append(Experiment(name, Path(name), {**SETTING, "peers": 2, **settings}, True))
        rows[name] = {"samples_per_second": 10.0, "time_to_target_seconds": 5.0}
    repeats = repeats_table(distinguish_labels(experiments), rows)
    assert sorted(row["repeats"] for row in repeats.rows) == [1, 1, 1, 1, 1, 2, 2]
    labels = [row["setting"] for row in repeats.rows]
    assert len(set(labels)) == len(labels), labels
    assert any("z1" in label for label in labels) and any(
        "H25 outer_momentum=0.5" in label for label in labels
    )
    assert any("latency_ms=20" in label for label in labels), labels


def _merge(*groups):
    return [e for group, _ in groups for e in group], {k: v for _, r in groups for k, v in r.items()}


def test_the_headline_family_is_the_grids_and_holm_corrects_it(tmp_path):
    """The comparisons a grid named before its runs, each metric's ratio, Welch p and Holm's adjusted p; a
    clear difference holds after the correction, a marginal one does not; MLPerf's reading from 5 runs."""
    from controller.grid.spec import load_grid
    from controller.report.data import PeerRun
    from controller.report.headline import headline_table, holm

    grid_file = tmp_path / "family.yml"
    grid_file.write_text(
        "name: family\nnoise_floor: false\n"
        "fixed: {model: smallcnn, dataset: synthetic, max_steps: 10}\n"
        "blocks:\n"
        "  - {name: base, repeats: 5, fixed: {strategy: baseline, peers: 1}}\n"
        "  - {name: two, repeats: 5, fixed: {strategy: hivemind, peers: 2}}\n"
        "headline:\n  loss_target: 1.0\n  comparisons:\n"
        "    - {name: two against base, runs: \"block == 'two'\", against: \"block == 'base'\"}\n"
    )
    grid = load_grid(grid_file)
    walls = {"base": [10.0, 10.2, 9.8, 10.1, 9.9], "two": [20.0, 20.5, 19.5, 20.2, 19.9]}
    experiments, curves = [], {}
    for run in grid.runs:
        wall = walls[run.block][run.repeat - 1]
        steps = [{"wall_seconds": wall / 2, "samples": 500}, {"wall_seconds": wall, "samples": 500}]
        experiments.append(
            Experiment(run.experiment_id, Path("."), run.settings, True, [PeerRun("p", steps, [], True)])
        )
        curves[run.experiment_id] = ([wall / 2, wall], [1.5, 0.9])  # the target reached at the end
    table = headline_table(grid, experiments, curves)
    rows = {row["metric"]: row for row in table.rows}
    assert set(rows) == {"samples/s", "time to loss 1"}
    throughput = rows["samples/s"]
    assert throughput["runs"] == throughput["against"] == "5 of 5"
    assert throughput["ratio"] == pytest.approx(0.5, rel=0.02) and throughput["ci_high"] < 1
    assert throughput["p_holm"] == pytest.approx(min(1.0, 2 * throughput["p_value"]))  # two tests
    assert throughput["verdict"] == "slower (Holm)" and throughput["mlperf_ratio"] == pytest.approx(
        0.5, rel=0.02
    )
    assert "Holm over 2 tests" in table.title
    assert holm([0.03, 0.02]) == [0.04, 0.04]  # 0.02 x 2, then max(0.04, 0.03 x 1): neither below 0.04
