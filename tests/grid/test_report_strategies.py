"""trainer report puts the strategies side by side: throughput speedup and efficiency against the baseline,
communication share and memory per peer, from results with known numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.data import Experiment, PeerRun


def _steps(step_seconds: float, averaging: float, count: int = 10) -> list[dict]:
    return [
        {
            "step": i,
            "wall_seconds": i * step_seconds,
            "data_seconds": 0.0,
            "compute_seconds": step_seconds - averaging,
            "optimizer_seconds": averaging,
            "averaging_seconds": averaging,
            "step_seconds": step_seconds,
            "samples": 32,
            "loss": 2.0 - 0.01 * i,
            "hivemind_epoch": 0,
            "peers": 1,
        }
        for i in range(1, count + 1)
    ]


def _experiment(name: str, strategy: str, peers: int, step_seconds: float, averaging: float, state: int):
    settings = {"strategy": strategy, "peers": peers, "model": "smallcnn", "dataset": "synthetic",
                "batch_size": 32, "learning_rate": 0.01, "vcpus": 1}  # fmt: skip
    memory = {"peak_rss_bytes": 500e6, "optimizer_state_bytes": state}
    runs = [
        PeerRun(f"peer-{i + 1:02d}", _steps(step_seconds, averaging), [], True, {"memory": memory})
        for i in range(peers)
    ]
    return Experiment(name, Path(name), settings, True, runs)


def test_speedup_efficiency_and_memory_per_strategy():
    experiments = [
        _experiment("base", "baseline", 1, 0.1, 0.0, 4000),  # 320 samples/s
        _experiment("ddp-2", "ddp", 2, 0.125, 0.025, 4000),  # 2 x 256 = 512 samples/s
        _experiment("zero-2", "zero", 2, 0.16, 0.06, 2000),  # 2 x 200 = 400 samples/s
    ]
    rows = {
        r["experiment_id"]: r
        for r in analyse(experiments, target_loss=None, bandwidth=None).tables["strategies"].rows
    }
    assert [rows[n]["strategy"] for n in ("base", "ddp-2", "zero-2")] == ["baseline", "ddp", "zero"]
    assert rows["base"]["throughput_speedup"] is None
    assert rows["ddp-2"]["throughput_speedup"] == pytest.approx(512 / 320)
    assert rows["ddp-2"]["efficiency"] == pytest.approx(512 / 320 / 2)
    assert rows["zero-2"]["throughput_speedup"] == pytest.approx(400 / 320)
    assert rows["ddp-2"]["communication_share"] == pytest.approx(0.2)
    assert rows["zero-2"]["optimizer_state_mb_max"] == pytest.approx(0.002)
    assert rows["ddp-2"]["setting"] == "ddp 2p bs32"


def test_report_draws_every_strategy(tmp_path):
    experiments = [
        _experiment("base", "baseline", 1, 0.1, 0.0, 4000),
        _experiment("ddp-2", "ddp", 2, 0.125, 0.025, 4000),
        _experiment("zero-2", "zero", 2, 0.16, 0.06, 2000),
        _experiment("fsdp-2", "fsdp", 2, 0.16, 0.06, 2000),
        _experiment("ds-2", "deepspeed", 2, 0.16, 0.06, 2000),
    ]
    from controller.report.command import write_report

    report = write_report(analyse(experiments, target_loss=None, bandwidth=None), tmp_path, tmp_path)
    assert "`strategies.csv`" in report.read_text()
    assert (tmp_path / "breakdown.png").stat().st_size > 0
    # every run with peers has two: no effect of peers to draw
    assert not (tmp_path / "effect_peers.png").exists()


def test_bytes_per_sample_and_memory_per_rank_with_each_zero_stage():
    """Bytes sent per sample from the peers' interface counts, the memory each rank holds,
    and DeepSpeed's stages as strategies of their own."""
    experiments = [
        _experiment("base", "baseline", 1, 0.1, 0.0, 4000),
        _experiment("fsdp-2", "fsdp", 2, 0.125, 0.025, 2000),
        _experiment("ds-z3", "deepspeed", 2, 0.16, 0.06, 2000),
        _experiment("ds-default", "deepspeed", 2, 0.16, 0.06, 2000),
    ]
    experiments[2].settings["zero_stage"] = 3
    for i, peer in enumerate(experiments[1].peers):  # 10 steps of 32 samples each
        peer.summary["network"] = {"sent_bytes": 32000 * (i + 1), "received_bytes": 1}
        peer.summary["memory"] = {
            "peak_rss_bytes": 600e6 + i,
            "parameter_bytes": 1e6 - i,
            "gradient_bytes": 1e6,
            "optimizer_state_bytes": 2e6,
        }
    tables = analyse(experiments, target_loss=None, bandwidth=None).tables
    rows = {r["experiment_id"]: r for r in tables["strategies"].rows}
    assert rows["fsdp-2"]["sent_bytes_per_sample"] == pytest.approx((32000 + 64000) / 640)
    assert rows["ds-z3"]["sent_bytes_per_sample"] is None  # no interface counts: no figure
    assert [rows[n]["strategy"] for n in ("ds-z3", "ds-default")] == ["deepspeed-z3", "deepspeed-z2"]
    memory = {r["experiment_id"]: r for r in tables["memory"].rows}
    assert set(memory) == {"base", "fsdp-2", "ds-z3", "ds-default"}
    assert memory["fsdp-2"]["parameter_mb"] == pytest.approx(1.0)  # the largest rank's
    assert memory["fsdp-2"]["optimizer_state_mb"] == pytest.approx(2.0)
    assert memory["fsdp-2"]["peak_rss_mb"] == pytest.approx(600.000001)
    assert memory["ds-z3"]["gradient_mb"] is None  # a summary without the figure
    assert memory["ds-z3"]["strategy"] == "deepspeed-z3"


def test_the_strategies_grid_keeps_every_zero_stage_and_diloco_h_apart_in_every_table():
    """The runs `trainer grid grids/strategies.yml --repeat 2` makes, as the report reads them
    (their settings from the grid, rates made up): ZeRO-1/2/3 and DiLoCo H 5/25 are separate settings in the
    repeats, comparisons and strategies tables and the diagnosis, never repeats of one."""
    from controller.grid.spec import load_grid
    from controller.report.data import distinguish_labels

    grid = load_grid(Path(__file__).resolve().parents[2] / "grids" / "strategies.yml", repeats=2)
    experiments = []
    for run in grid.runs:
        if run.block == "noise-floor":
            continue
        peers = int(run.settings["peers"])
        # a rate per setting that differs between ZeRO stages and syncs, and a little between repeats
        step = (
            0.1
            + 0.01 * int(run.settings.get("zero_stage") or 0)
            + 0.001 * int(run.settings.get("sync_every") or 0)
        )
        step *= 1 + 0.01 * run.repeat
        settings = {**run.settings, "vcpus": 1}
        runs = [PeerRun(f"peer-{i + 1:02d}", _steps(step, 0.0), [], True) for i in range(peers)]
        experiments.append(Experiment(run.experiment_id, Path(run.experiment_id), settings, True, runs))
    analysis = analyse(distinguish_labels(experiments), target_loss=None, bandwidth=None)
    expected = {f"deepspeed-z{stage} {p}p bs32" for stage in (1, 2, 3) for p in (2, 4)}
    expected |= {f"diloco {p}p bs32 H{h}" for h in (5, 25) for p in (2, 4)}
    repeats = {row["setting"]: row["repeats"] for row in analysis.tables["repeats"].rows}
    assert {label: repeats.get(label) for label in expected} == dict.fromkeys(expected, 2), repeats
    compared = {row["setting"] for row in analysis.tables["comparisons"].rows}
    assert expected <= compared, compared
    settings_per_run = {row["experiment_id"]: row["setting"] for row in analysis.tables["strategies"].rows}
    for table in ("strategies", "diagnosis"):
        labels = [row["setting"] for row in analysis.tables[table].rows]
        assert all(labels.count(label) == 2 for label in expected), (table, labels)
    assert len(set(settings_per_run.values())) == len(settings_per_run) // 2
