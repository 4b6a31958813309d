"""trainer report on results of real, short trainer runs: every plot and table, and numbers by hand."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from grid_support import RUN_SETTINGS as SETTINGS
from grid_support import TARGET, hivemind_pair, trainer, write_experiment_json

from controller.calibration import KIND
from controller.report.breakdown import AVERAGING_PARTS
from controller.report.command import parse_bandwidth
from controller.report.metrics import bandwidth_bound
from experiment.results import read_summary
from trainer import memory
from trainer.models import build_model

TABLES = ("experiments", "time_to_target", "breakdown", "averaging", "effects")
# the baselines differ in their learning rate alone: the one factor with an effect plot
PLOTS = ("breakdown.png", "averaging.png", "effect_learning_rate.png")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def rows_by_id(path: Path) -> dict[str, dict[str, str]]:
    return {row["experiment_id"]: row for row in read_csv(path)}


def smoothed_time_to_target(steps: list[dict[str, str]], target: float, window: int) -> float | None:
    losses: list[float] = []
    for row in steps:
        losses.append(float(row["loss"]))
        recent = losses[-window:]
        if sum(recent) / len(recent) <= target:
            return float(row["wall_seconds"])
    return None


def test_report_on_baseline_runs(baseline_results, tmp_path):
    out = tmp_path / "report"
    completed = trainer("report", str(baseline_results), "--out", str(out), "--target-loss", str(TARGET))
    assert completed.returncode == 0, completed.stderr
    for name in TABLES:
        assert (out / f"{name}.csv").exists(), name
    loss_plots = sorted(out.glob("loss_*.png"))
    assert [p.name for p in loss_plots] == [
        "loss_smallcnn_synthetic_bs16_lr0.002.png",
        "loss_smallcnn_synthetic_bs16_lr0.01.png",
    ]
    report = (out / "report.md").read_text()
    for plot in (*PLOTS, *(p.name for p in loss_plots)):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f"]({plot})" in report, plot
    for name in TABLES:
        assert f"`{name}.csv`" in report
    assert sorted(p.name for p in out.glob("effect_*.png")) == ["effect_learning_rate.png"]
    unplotted = "target_batch_size, local_updates, peers, batch_size, compression, cross_traffic, latency_ms"
    assert f"No plot for {unplotted}: no runs differ in one of them alone." in report

    # numbers by hand from the raw steps.csv
    steps = read_csv(baseline_results / "base-lr0p01-r1" / "baseline" / "steps.csv")
    breakdown = rows_by_id(out / "breakdown.csv")["base-lr0p01-r1"]
    data = [float(row["data_seconds"]) for row in steps]
    step = [float(row["step_seconds"]) for row in steps]
    assert float(breakdown["data_ms"]) == pytest.approx(1000 * statistics.mean(data), rel=1e-6)
    assert float(breakdown["data_share"]) == pytest.approx(sum(data) / sum(step), rel=1e-6)
    assert float(breakdown["averaging_share"]) == 0.0
    experiment = rows_by_id(out / "experiments.csv")["base-lr0p01-r1"]
    samples = sum(int(row["samples"]) for row in steps)
    assert int(experiment["samples"]) == samples == len(steps) * 16
    assert float(experiment["samples_per_second"]) == pytest.approx(
        samples / float(steps[-1]["wall_seconds"])
    )
    by_hand = smoothed_time_to_target(steps, TARGET, window=10)
    assert by_hand is not None, "the baseline should reach the target loss"
    assert float(experiment["time_to_target_seconds"]) == pytest.approx(by_hand)
    # the trainer measured the same while running (trainer/stats.py): the two implementations agree
    summary = json.loads((baseline_results / "base-lr0p01-r1" / "baseline" / "summary.json").read_text())
    assert summary["time_to_target_loss_seconds"] == pytest.approx(by_hand, abs=1e-6)

    effects = [
        r for r in read_csv(out / "effects.csv") if r["factor"] == "learning_rate" and r["level"] == "0.01"
    ]
    times = next(r for r in effects if r["metric"] == "time_to_target_seconds")
    assert times["experiments"] == "2"  # both repeats listed, not hidden in a mean
    assert len(times["values"].split()) == 2

    # The two repeats of LR 0.01 get an interval of their samples/s; the single run at 0.002 none
    repeats = {row["setting"]: row for row in read_csv(out / "repeats.csv")}
    repeated = repeats["baseline bs16 lr0.01"]
    rates = [
        float(rows_by_id(out / "experiments.csv")[name]["samples_per_second"])
        for name in ("base-lr0p01-r1", "base-lr0p01-r2")
    ]
    assert repeated["repeats"] == "2"
    assert float(repeated["samples_per_second_median"]) == pytest.approx(statistics.median(rates))
    low, high = float(repeated["samples_per_second_ci_low"]), float(repeated["samples_per_second_ci_high"])
    # Student's t with 1 degree of freedom: far wider than the two values, and exactly that (a
    # rate's interval ends at 0)
    half = 12.7062047 * statistics.stdev(rates) / math.sqrt(2)
    expected = (max(0.0, statistics.mean(rates) - half), statistics.mean(rates) + half)
    assert (low, high) == pytest.approx(expected)
    assert low < min(rates) <= max(rates) < high
    assert repeats["baseline bs16 lr0.002"]["samples_per_second_ci_low"] == ""
    assert "## Repeats, intervals and verdicts" in report and "`repeats.csv`" in report


def test_default_target_is_the_baselines_worst_final_loss(baseline_results, tmp_path):
    completed = trainer("report", str(baseline_results), "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    rows = rows_by_id(tmp_path / "experiments.csv")
    finals = []  # each stopped at TARGET or ran its 60 steps
    for name in ("base-lr0p01-r1", "base-lr0p01-r2"):
        losses = [float(r["loss"]) for r in read_csv(baseline_results / name / "baseline" / "steps.csv")]
        finals.append(statistics.mean(losses[-10:]))
    for name in ("base-lr0p01-r1", "base-lr0p01-r2"):
        assert float(rows[name]["target_loss"]) == pytest.approx(max(finals))
        assert rows[name]["time_to_target_seconds"] != ""  # every repeat reaches it


def test_bandwidth_bound_and_model_size():
    # M as the trainer measures it (summary.json memory.parameter_bytes): torchvision ResNet18, 10 classes
    assert memory.model_bytes(build_model("resnet18"))["parameters"] == 4 * 11_181_642
    # the study's numbers: 46.8 MB at 1 Gbit/s → 0.37 s for 2 peers, 0.65 s for 8
    assert bandwidth_bound(2, 46.8e6, parse_bandwidth("1Gbit")) == pytest.approx(0.374, abs=0.001)
    assert bandwidth_bound(8, 46.8e6, parse_bandwidth("1Gbit")) == pytest.approx(0.655, abs=0.001)
    assert parse_bandwidth("125MB") == parse_bandwidth("1e9bit") == 1.25e8
    assert parse_bandwidth("940Mbit/s") == pytest.approx(1.175e8)
    for bad in ("fast", "-1Gbit", "0"):
        with pytest.raises(ValueError):
            parse_bandwidth(bad)


def test_report_refuses_bad_input(tmp_path):
    empty = trainer("report", str(tmp_path))
    assert empty.returncode == 2 and "no experiment results" in empty.stderr
    missing = trainer("report", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "results directory not found" in missing.stderr
    bandwidth = trainer("report", str(tmp_path), "--bandwidth", "fast")
    assert bandwidth.returncode == 2 and "bandwidth must be" in bandwidth.stderr


@pytest.mark.hivemind
@pytest.mark.cluster
@pytest.mark.load_tolerant
@pytest.mark.local_lane  # ends the two lanes of `make test` together
def test_report_compares_hivemind_with_its_baselines(baseline_results, tmp_path):
    results = tmp_path / "results"
    for child in baseline_results.iterdir():
        if child.is_dir() and child.name.startswith("base-"):
            (results / child.name).parent.mkdir(parents=True, exist_ok=True)
            (results / child.name).symlink_to(child)
    hivemind = results / "hm-2p-r1"
    hivemind_pair(hivemind, run_id="hm-2p-r1", learning_rate=0.01, steps=40)
    settings = {
        **SETTINGS,
        "learning_rate": 0.01,
        "max_steps": 40,
        "target_batch_size": 64,
        "local_updates": False,
    }
    write_experiment_json(hivemind, strategy="hivemind", peers=2, settings=settings, complete=True)
    target = 2.25
    out = tmp_path / "report"
    # A compute calibration in which a one-vCPU process trains at 100 samples/s
    calibration = tmp_path / "calibration.json"
    rates = [
        {"model": "smallcnn", "batch_size": SETTINGS["batch_size"], "threads": 1, "samples_per_second": 100}
    ]
    calibration.write_text(json.dumps({"kind": KIND, "measured_on": {"cores": 2}, "rates": rates}))
    completed = trainer(
        *("report", str(results), "--out", str(out), "--target-loss", str(target), "--bandwidth", "1Gbit"),
        *("--calibration", str(calibration)),
    )
    assert completed.returncode == 0, completed.stderr
    # the ceiling beside the speedups: two one-vCPU peers over a one-vCPU baseline, averaging for free
    assert float(rows_by_id(out / "time_to_target.csv")["hm-2p-r1"]["ceiling_speedup"]) == 2.0
    assert float(rows_by_id(out / "strategies.csv")["hm-2p-r1"]["ceiling_speedup"]) == 2.0
    assert f"from the compute calibration {calibration}" in (out / "report.md").read_text()
    # One Hivemind run against two baselines: a ratio, but no interval or verdict without repeats
    (row,) = read_csv(out / "comparisons.csv")
    assert (row["repeats"], row["baseline_repeats"]) == ("1", "2")
    assert row["throughput_ci_low"] == "" and row["throughput_verdict"] == "needs 2 runs a side"

    # averaging per round, by hand from both peers' rounds.csv
    rounds = [r for peer in ("peer-01", "peer-02") for r in read_csv(hivemind / peer / "rounds.csv")]
    gradients = [
        float(r["allreduce_seconds"])
        for r in rounds
        if r["kind"] == "gradients" and r["outcome"] == "ok" and r["allreduce_seconds"]
    ]
    assert gradients, "the Hivemind run should have averaged gradients"
    row = next(r for r in read_csv(out / "averaging.csv") if r["kind"] == "gradients")
    assert float(row["allreduce_median_s"]) == pytest.approx(statistics.median(gradients))
    measured = read_summary(hivemind / "peer-01")["memory"]["parameter_bytes"]
    assert measured == 4 * sum(p.numel() for p in build_model("smallcnn").parameters())
    bound = 2 * (2 - 1) / 2 * measured / 1.25e8
    assert float(row["lower_bound_s"]) == pytest.approx(bound)

    # speedup and scaling efficiency against the two matching baselines
    def time_to(directory: Path, peers: list[str]) -> float | None:
        steps = [r for p in peers for r in read_csv(directory / p / "steps.csv")]
        steps.sort(key=lambda r: float(r["wall_seconds"]))
        return smoothed_time_to_target(steps, target, window=10 * len(peers))

    base = statistics.median(
        t for t in (time_to(results / n, ["baseline"]) for n in ("base-lr0p01-r1", "base-lr0p01-r2")) if t
    )
    mine = time_to(hivemind, ["peer-01", "peer-02"])
    speed = rows_by_id(out / "time_to_target.csv")["hm-2p-r1"]
    assert float(speed["baseline_time_s"]) == pytest.approx(base)
    assert speed["baselines"] == "2"
    if mine is None:
        assert speed["speedup"] == ""
    else:
        assert float(speed["hivemind_time_s"]) == pytest.approx(mine)
        assert float(speed["speedup"]) == pytest.approx(base / mine)
        # baseline 1 vCPU; Hivemind 2 peers × 1 vCPU
        assert float(speed["scaling_efficiency"]) == pytest.approx(base / mine * 1 / 2)
    share = rows_by_id(out / "breakdown.csv")["hm-2p-r1"]
    assert 0 < float(share["averaging_share"]) < 1
    # The averaging part split by where the steps waited, adding up to it
    split = {part: float(share[f"{part}_ms"]) for part in AVERAGING_PARTS}
    assert sum(split.values()) == pytest.approx(float(share["averaging_ms"]), rel=1e-6, abs=1e-9)
    # each part no more than what the rounds the steps waited through measured of it (both peers' rounds.csv)
    waited = [r for peer in ("peer-01", "peer-02") for r in read_csv(hivemind / peer / "rounds.csv")
              if float(r["blocking_seconds"] or 0) > 0]  # fmt: skip
    step_count = sum(len(read_csv(hivemind / peer / "steps.csv")) for peer in ("peer-01", "peer-02"))
    for part in ("allreduce", "matchmaking"):
        measured = sum(float(r[f"{part}_seconds"] or 0) for r in waited)
        assert split[part] * step_count / 1000 <= measured + 1e-6, (part, split, measured)
    assert split["matchmaking"] + split["allreduce"] + split["background_wait"] > 0, split

    # run edges: the first epoch, the middle ones and the last two, by hand from both peers' steps
    steps = [r for peer in ("peer-01", "peer-02") for r in read_csv(hivemind / peer / "steps.csv")]
    epochs = sorted({int(r["hivemind_epoch"]) for r in steps})
    assert len(epochs) >= 4, epochs
    phases = {r["phase"]: r for r in read_csv(out / "epoch_phases.csv") if r["experiment_id"] == "hm-2p-r1"}
    assert list(phases) == ["first", "middle", "last two"]
    last_two = [r for r in steps if int(r["hivemind_epoch"]) in epochs[-2:]]
    assert int(phases["last two"]["steps"]) == len(last_two)
    mean_ms = 1000 * statistics.mean(float(r["step_seconds"]) for r in last_two)
    assert float(phases["last two"]["step_ms"]) == pytest.approx(mean_ms)
    assert sum(int(row["steps"]) for row in phases.values()) == len(steps)
    # the CSV keeps 12 significant digits per share, so their sum may miss 1 by a few 1e-12
    assert math.isclose(
        sum(float(share[f"{p}_share"]) for p in ("data", "compute", "averaging", "optimizer_local", "other")),
        1.0,
        abs_tol=1e-10,
    )


def test_results_without_experiment_json_are_read_from_config_json(baseline_results, tmp_path):
    """Plain `trainer run` results (no playbook) are reported with the settings the trainer recorded."""
    from controller.report.data import load_experiments

    shutil.copytree(baseline_results / "base-lr0p002-r1" / "baseline", tmp_path / "plain" / "baseline")
    (tmp_path / "not-a-run").mkdir()
    [experiment] = load_experiments(tmp_path)
    assert experiment.experiment_id == "plain"
    assert experiment.is_baseline and experiment.complete
    assert experiment.comparison_key() == ("smallcnn", "synthetic", 16, 0.002)


def test_report_counts_failed_rounds_by_cause(tmp_path):
    """experiments.csv counts each experiment's failed rounds per cause (rounds.csv `cause`)."""
    from experiment.results import ResultsWriter, RoundRecord, StepRecord

    results = tmp_path / "results" / "hm-causes"
    for peer in ("peer-01", "peer-02"):
        writer = ResultsWriter(results / peer)
        writer.start_clock(1000.0)
        for step in range(1, 11):
            times = {"data_seconds": 0.01, "compute_seconds": 0.1, "optimizer_seconds": 0.2}
            writer.write_step(
                StepRecord(step=step, timestamp=1000.0 + step, **times, averaging_seconds=0.1,
                           step_seconds=0.31, samples=16, loss=2.0 - 0.1 * step, hivemind_epoch=step // 5,
                           peers=2)
            )  # fmt: skip
        rounds = ((1003.0, "ok", 0.2), (1006.0, "timeout", None), (1009.0, "failed", 0.2))
        for when, outcome, allreduce in rounds:
            round_record = RoundRecord(when, 0, "gradients", outcome, allreduce_seconds=allreduce)
            writer.write_round(round_record)
        writer.close()
    settings = {"model": "smallcnn"}
    write_experiment_json(results, strategy="hivemind", peers=2, settings=settings, complete=True)
    completed = trainer("report", str(results.parent), "--out", str(tmp_path / "report"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    row = rows_by_id(tmp_path / "report" / "experiments.csv")["hm-causes"]
    assert (row["rounds_ok"], row["rounds_failed"]) == ("2", "4")
    causes = (row["failed_no_group"], row["failed_peer_left"], row["failed_allreduce_timeout"])
    assert causes == ("2", "2", "0")


def test_report_says_when_the_hosts_clocks_were_apart(baseline_results, tmp_path):
    """experiment.json's ``clocks`` (playbooks/reach.yml): a run whose hosts' clocks were apart is named with
    the warning; runs without it add no line."""
    results = tmp_path / "results"
    shutil.copytree(baseline_results, results)
    from controller.summary import testbed_clock_check

    clocks = testbed_clock_check({"peer-01": ["100.9 100.0"], "monitor": ["100.05 100.0"]})
    path = results / "base-lr0p002-r1" / "experiment.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "clocks": clocks}))
    out = tmp_path / "report"
    completed = trainer("report", str(results), "--out", str(out))
    assert completed.returncode == 0, completed.stderr
    report = (out / "report.md").read_text()
    assert "- base-lr0p002-r1: hosts' clocks 0.85 s apart (limit 0.5 s" in report, report[:3000]
    assert report.count("hosts' clocks") == 1
