"""trainer report's cost: runs whose hosts carry the inventory's prices get a cost row (vCPU-hours
and egress for the training's modelled time, per 1000 samples, to the target); runs without prices get none,
and a report on them has no cost section. Numbers checked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.command import write_report
from controller.report.data import Experiment, PeerRun

STEPS = 36  # one step a modelled 100 s: the training lasts 3600 s, an hour


def _steps(*, loss_drop: float) -> list[dict]:
    return [
        {
            "step": step,
            "wall_seconds": 100.0 * step,
            "step_seconds": 100.0,
            "compute_seconds": 100.0,
            "samples": 50,
            "loss": 3.0 - loss_drop * step,
        }
        for step in range(1, STEPS + 1)
    ]


def _run(name: str, *, strategy: str, hosts: dict[str, dict], sent: float, loss_drop: float) -> Experiment:
    settings = {"strategy": strategy, "peers": len(hosts), "model": "smallcnn", "dataset": "synthetic"}
    settings.update(batch_size=32, learning_rate=0.01, vcpus=next(iter(hosts.values()))["vcpus"])
    names = ["baseline"] if strategy == "baseline" else list(hosts)
    peers = [
        PeerRun(peer, _steps(loss_drop=loss_drop), [], True, {"network": {"sent_bytes": sent}})
        for peer in names
    ]
    # a dilated run: its rows are in modelled time already (controller/report/data.py), D only recorded
    return Experiment(name, Path(name), settings, True, peers, hosts=hosts, time_dilation=4.0)


PRICED = {"price_per_vcpu_hour": 0.04, "price_per_gb_egress": 0.1}


@pytest.fixture
def analysis():
    experiments = [
        # one 16-vCPU host for an hour: 16 vCPU-hours at 0.04; it sent 0.5 GB
        _run("base", strategy="baseline", hosts={"peer-01": {"vcpus": 16, **PRICED}}, sent=5e8,
             loss_drop=0.01),
        # two 8-vCPU peers for an hour, each sent 1 GB; twice as fast to the target loss
        _run(
            "hive",
            strategy="hivemind",
            hosts={"peer-01": {"vcpus": 8, **PRICED}, "peer-02": {"vcpus": 8, **PRICED}},
            sent=1e9,
            loss_drop=0.02,
        ),
        # no prices: no cost
        _run("free", strategy="hivemind", hosts={"peer-01": {"vcpus": 8}, "peer-02": {"vcpus": 8}}, sent=3e9,
             loss_drop=0.02),
    ]  # fmt: skip
    return analyse(experiments, target_loss=2.7, bandwidth=None)


def test_each_priced_run_costs_its_vcpus_for_its_training_and_its_egress(analysis):
    rows = {row["experiment_id"]: row for row in analysis.tables["cost"].rows}
    assert set(rows) == {"base", "hive"}  # "free" has no prices
    base, hive = rows["base"], rows["hive"]
    assert base["training_seconds"] == pytest.approx(3600)  # modelled time, not D times it
    assert base["vcpu_hours"] == pytest.approx(16) and hive["vcpu_hours"] == pytest.approx(16)
    assert base["compute_cost"] == pytest.approx(0.64) and hive["compute_cost"] == pytest.approx(0.64)
    assert base["egress_gb"] == pytest.approx(0.5) and base["egress_cost"] == pytest.approx(0.05)
    assert hive["egress_gb"] == pytest.approx(2.0) and hive["egress_cost"] == pytest.approx(0.2)
    assert hive["cost"] == pytest.approx(0.84) and hive["priced_hosts"] == "2/2"
    # 36 steps x 50 samples per peer: 1800 samples for the baseline, 3600 for the pair
    assert base["cost_per_1000_samples"] == pytest.approx(0.69 / 1.8)
    assert hive["cost_per_1000_samples"] == pytest.approx(0.84 / 3.6)


def test_the_cost_to_the_target_counts_the_time_to_it(analysis):
    rows = {row["experiment_id"]: row for row in analysis.tables["cost"].rows}
    reached = {row["experiment_id"]: row for row in analysis.tables["experiments"].rows}
    for name in ("base", "hive"):
        seconds = reached[name]["time_to_target_seconds"]
        assert seconds is not None and 0 < seconds < 3600, (name, seconds)
        assert rows[name]["cost_to_target"] == pytest.approx(rows[name]["cost"] * seconds / 3600)
    # the pair reaches the loss in half the time: for less, although it sent more
    assert rows["hive"]["cost_to_target"] < rows["base"]["cost_to_target"]
    assert rows["base"]["cost_to_accuracy"] is None  # no accuracy was measured


def test_the_report_shows_the_cost_only_where_prices_were_given(analysis, tmp_path):
    report = write_report(analysis, tmp_path, tmp_path).read_text()
    assert "## Cost (the inventory's prices, docs/cost.md)" in report
    assert "| hive |" in report.replace("  ", " ")
    unpriced = analyse(
        [e for e in analysis.experiments if e.experiment_id == "free"], target_loss=2.7, bandwidth=None
    )
    out = tmp_path / "free"
    out.mkdir()
    assert "Cost" not in write_report(unpriced, out, out).read_text()
    assert "cost" not in " ".join(unpriced.tables["experiments"].columns)
