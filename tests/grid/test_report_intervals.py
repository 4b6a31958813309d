"""controller.report.intervals (issue #26): repeats, bootstrap intervals and verdicts, on set numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.report.data import Experiment
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
    assert row["throughput_speedup"] == pytest.approx(151.2 / 100)
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
    assert row["throughput_verdict"] == "needs repeats"
    assert row["time_to_target_speedup"] is None and row["time_to_target_verdict"] == "no data"
    assert all(r["samples_per_second_ci_low"] is None and r["samples_per_second_trimmed_mean"] is None
               for r in repeats.rows)  # fmt: skip
    lines = verdict_lines(comparisons, repeats)
    assert lines[0].startswith("Intervals need repeats: every setting here ran once")
    assert "1.20x, needs repeats (1 vs 1 runs)" in lines[1]


def test_a_setting_without_matching_baselines_is_not_compared():
    base = _runs("base", "baseline", [100, 101], [60, 61], peers=1, batch_size=64)
    other = _runs("hm", "hivemind", [120, 121], [50, 51], peers=2)
    _, comparisons = _report(base, other)
    assert comparisons.rows == []
    repeats, comparisons = _report(base, other)
    assert verdict_lines(comparisons, repeats) == [
        "No comparison: no baseline shares a setting's model, data, batch size and LR."
    ]
