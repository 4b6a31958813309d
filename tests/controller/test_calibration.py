"""controller.calibration: compute calibrations, the shipped one and bad files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from controller.calibration import DEFAULT, KIND, CalibrationError, load
from controller.sizing import COLLECTIVE_HEADROOM, COMPUTE_HEADROOM

SHIPPED = load(DEFAULT)


def rate(vcpus: int) -> float:
    """The shipped calibration's samples/s of a ``vcpus``-thread ResNet18 process at BS 32."""
    return SHIPPED.rate("resnet18", 32, vcpus)


def test_the_shipped_calibration_is_the_16_core_machines_and_threads_do_not_add_up():
    calibration = load(DEFAULT)
    assert calibration.measured_on["cores"] == 16
    for batch_size in (32, 64, 128):  # the study's batch sizes
        curve = calibration.curve("resnet18", batch_size)
        assert sorted(curve) == [1, 2, 4, 8, 16]
        speedups = [calibration.speedup("resnet18", batch_size, threads) for threads in sorted(curve)]
        assert speedups == sorted(speedups) and speedups[0] == 1.0
        assert speedups[-1] < 0.6 * 16, speedups  # far from linear: the reason the calibration exists


def _write(tmp_path, rates, **extra):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"kind": KIND, "measured_on": {"cores": 2}, "rates": rates, **extra}))
    return path


#: the quota a calibrated container gets over its plan, for its trainer's pacing
ROOM = 1 + COMPUTE_HEADROOM

ROW = {"model": "resnet18", "batch_size": 32, "threads": 1, "samples_per_second": 100.0}


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ([], '"rates" must be a non-empty list'),
        ([{**ROW, "threads": 0}], "rates[0]: threads must be an integer >= 1 (got 0)"),
        ([{**ROW, "batch_size": "32"}], "rates[0]: batch_size must be an integer >= 1 (got '32')"),
        ([{**ROW, "model": ""}], "rates[0]: model must be a name"),
        ([ROW, ROW], "rates[1]: a second rate for resnet18 at batch size 32, 1 threads"),
    ],
)
def test_a_bad_file_is_one_error_naming_the_file_and_the_row(tmp_path, rates, message):
    path = _write(tmp_path, rates)
    with pytest.raises(CalibrationError) as error:
        load(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_not_a_calibration_and_not_json_are_refused(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(CalibrationError, match="not a calibration"):
        load(other)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CalibrationError, match="not a readable JSON file"):
        load(broken)


def test_a_missing_curve_or_thread_count_names_what_the_file_has(tmp_path):
    calibration = load(_write(tmp_path, [ROW, {**ROW, "threads": 2, "samples_per_second": 180.0}]))
    assert calibration.speedup("resnet18", 32, 2) == pytest.approx(1.8)
    with pytest.raises(CalibrationError, match=r"no rate for 4 threads \(it has 1, 2\)"):
        calibration.speedup("resnet18", 32, 4)
    with pytest.raises(
        CalibrationError, match="no rates for smallcnn at batch size 32 .it has resnet18 at 32"
    ):
        calibration.curve("smallcnn", 32)


def test_the_ceiling_takes_each_peers_own_vcpus_and_the_median_baseline():
    """Heterogeneous peers (experiment.json hosts, 8 + 8 + 4 vCPUs), each at its own calibrated rate."""
    from controller.report.data import Experiment
    from controller.report.strategies import ceiling_speedup

    calibration = load(DEFAULT)
    settings = {"model": "resnet18", "batch_size": 32, "vcpus": 8, "peers": 3}
    hosts = {"peer-01": {"vcpus": 8}, "peer-02": {"vcpus": 8}, "peer-03": {"vcpus": 4}}
    hivemind = Experiment("hm", Path("hm"), {**settings, "strategy": "hivemind"}, True, hosts=hosts)
    baseline = Experiment("base", Path("base"), {**settings, "strategy": "baseline", "vcpus": 16}, True)
    ceiling = ceiling_speedup(calibration, hivemind, [baseline])
    assert ceiling == pytest.approx((rate(8) + rate(8) + rate(4)) / rate(16))
    assert ceiling_speedup(None, hivemind, [baseline]) is None  # no calibration, no ceiling
    smallcnn = Experiment("s", Path("s"), {**settings, "model": "smallcnn"}, True, hosts=hosts)
    assert ceiling_speedup(calibration, smallcnn, [baseline]) is None  # no rate for the model


def test_the_report_refuses_a_bad_calibration_before_reading_results(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    run = subprocess.run(
        [sys.executable, "-m", "trainer", "report", str(tmp_path), "--calibration", str(bad)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "not a calibration" in run.stderr, run.stderr
    assert not (tmp_path / "report").exists()


# ----------------------------------------------------------------- each container's CPU from the calibration
def _inventory(tmp_path, vcpus: list[int], one_thread: float | None = 91.5, batch_size: int = 32) -> dict:
    """A local inventory of len(vcpus) hosts, this machine's one-thread rate cached as validate.yml does."""
    hosts = [f"peer-{i:02d}" for i in range(1, len(vcpus) + 1)]
    hostvars = {
        h: {"cluster_address": "10.89.64.101", "memory_mb": 2048, "vcpus": v}
        for h, v in zip(hosts, vcpus, strict=True)
    }
    cache = tmp_path / "local-rate"
    if one_thread is not None:
        cache.mkdir(exist_ok=True)
        # as `trainer calibrate --share N:CORES` writes it: what one core of quota trains, shared N ways
        row = {
            "model": "resnet18",
            "batch_size": batch_size,
            "threads": 1,
            "samples_per_second": one_thread / 2,
        }
        row.update(processes=len(vcpus), quota_cores=0.5, samples_per_core_second=one_thread)
        _write(tmp_path, [row]).rename(cache / f"resnet18-bs{batch_size}-n{len(vcpus)}.json")
    return {
        "peers": hosts,
        "local": True,
        "host_cores": 2,
        "hostvars": hostvars,
        "local_rate_dir": str(cache),
        # as validate.yml's second plan, once it measured the rate for this run
        "local_rate_fresh": True,
        # no dataset held on the controller: the rate is measured on synthetic images
        "datasets_dir": str(tmp_path / "datasets"),
    }


def test_each_container_trains_at_its_calibrated_rate_over_one_dilation(tmp_path):
    """16 one-vCPU peers and the 16-vCPU baseline, planned from the shipped calibration: one thread per
    container at the share of a core giving its calibrated rate / D, and the ceiling survives the model."""
    from controller.plan import testbed_experiment

    shipped = load(DEFAULT)
    peers = testbed_experiment({"peers": "16"}, _inventory(tmp_path, [1] * 16))
    assert peers["errors"] == [], peers["errors"]
    d_peers = peers["time_dilation"]
    # all 16 fill the 1.75-core budget
    assert d_peers == pytest.approx(ROOM * 16 * rate(1) / (1.75 * 91.5), rel=1e-6)
    for entry in peers["plan"].values():
        assert entry["threads"] == 1 and entry["modelled_samples_per_second"] == rate(1)
        # the plan's share and the headroom above it that the trainer's pacing holds the plan with
        assert entry["cpus_limit"] == pytest.approx(ROOM * rate(1) / d_peers / 91.5, abs=1e-3)
    assert sum(e["cpus_limit"] for e in peers["plan"].values()) == pytest.approx(1.75, abs=0.01)
    assert peers["compute"]["calibration_file"] == str(DEFAULT)
    assert peers["compute"]["local_one_thread_rate"] == 91.5
    assert peers["trainer_settings"]["time_dilation"] == d_peers
    # run_timeout is modelled like every time setting: the playbook waits it x D
    assert peers["run_timeout_seconds"] == math.ceil(3600 * d_peers) > 3600
    longer = testbed_experiment({"peers": "16", "run_timeout": "600"}, _inventory(tmp_path, [1] * 16))
    assert longer["run_timeout_seconds"] == math.ceil(600 * d_peers)

    baseline = testbed_experiment({"strategy": "baseline", "peers": "1"}, _inventory(tmp_path, [16]))
    assert baseline["errors"] == []
    entry = baseline["plan"]["peer-01"]
    # one thread can use one core at most: D is the calibrated rate over this machine's one-thread rate
    assert entry["cpus_limit"] == 1.0 and entry["threads"] == 1
    assert baseline["time_dilation"] == pytest.approx(ROOM * rate(16) / 91.5)
    assert baseline["trainer_settings"]["hold_rate"] == 91.5
    assert baseline["trainer_settings"]["hold_headroom"] == COMPUTE_HEADROOM
    # modelled = local x D: what each run's containers deliver, in the study's units
    modelled_peers = sum(e["local_samples_per_second"] for e in peers["plan"].values()) * d_peers
    modelled_baseline = entry["local_samples_per_second"] * baseline["time_dilation"]
    assert modelled_peers / modelled_baseline == pytest.approx(
        shipped.ceiling("resnet18", 32, [1] * 16, 16), rel=1e-3
    )


def test_a_strategy_whose_collectives_share_the_step_gets_more_headroom(tmp_path):
    """DDP's ranks run their all-reduce beside the training thread in every step: their containers get
    COLLECTIVE_HEADROOM above the plan, D grows with it, and the trainer paces to the same share."""
    from controller.plan import testbed_experiment

    hivemind = testbed_experiment({"peers": "4"}, _inventory(tmp_path, [4] * 4))
    ddp = testbed_experiment({"peers": "4", "strategy": "ddp"}, _inventory(tmp_path, [4] * 4))
    assert hivemind["errors"] == [] and ddp["errors"] == [], (hivemind["errors"], ddp["errors"])
    assert COLLECTIVE_HEADROOM > COMPUTE_HEADROOM
    assert ddp["compute"]["headroom"] == ddp["trainer_settings"]["hold_headroom"] == COLLECTIVE_HEADROOM
    assert (
        hivemind["compute"]["headroom"] == hivemind["trainer_settings"]["hold_headroom"] == COMPUTE_HEADROOM
    )
    d_ddp = ddp["time_dilation"]
    assert d_ddp == pytest.approx(hivemind["time_dilation"] * (1 + COLLECTIVE_HEADROOM) / ROOM, rel=1e-6)
    for entry in ddp["plan"].values():
        assert entry["cpus_limit"] == pytest.approx(
            (1 + COLLECTIVE_HEADROOM) * rate(4) / d_ddp / 91.5, abs=1e-3
        )


def test_heterogeneous_hosts_keep_their_calibrated_ratio_not_their_vcpu_ratio(tmp_path):
    from controller.plan import testbed_experiment

    result = testbed_experiment({"peers": "3"}, _inventory(tmp_path, [8, 2, 2]))
    plan = result["plan"]
    assert result["errors"] == []
    ratio = plan["peer-01"]["cpus_limit"] / plan["peer-02"]["cpus_limit"]
    assert ratio == pytest.approx(rate(8) / rate(2), rel=0.01)  # not 8 / 2
    assert {e["threads"] for e in plan.values()} == {1}


def test_the_one_thread_rate_is_asked_for_once_and_a_factor_must_fit(tmp_path):
    from controller.plan import testbed_experiment

    missing = testbed_experiment({"peers": "2"}, _inventory(tmp_path, [8, 8], one_thread=None))
    assert missing["errors"] == [] and missing["compute"] is None
    assert missing["local_rate_needed"] == {  # measured with the run's two containers' shares of the budget
        "model": "resnet18",
        "batch_size": 32,
        "file": str(tmp_path / "local-rate" / "resnet18-bs32-n2.json"),
        "steps": 40,
        "share": "2:0.875",
        "dataset": "synthetic",
        "data_root": None,
        "why": "not measured yet",
    }
    inventory = _inventory(tmp_path, [8, 8])
    fits = testbed_experiment({"peers": "2", "time_dilation": "20"}, inventory)
    assert fits["errors"] == [] and fits["time_dilation"] == 20.0 and fits["local_rate_needed"] is None
    # measured on this machine (the file records cores 2) for this run: used; on another torch or CPU:
    # measured again
    same = {"cores": 2, "cpu_model": "any", "torch": "2.1"}
    used = testbed_experiment({"peers": "2", "time_dilation": "20"}, {**inventory, "machine": same})
    assert used["local_rate_needed"] is None and used["compute"]["local_one_thread_rate"] == 91.5
    assert used["compute"]["local_rate_reused"] is False
    moved = testbed_experiment({"peers": "2"}, {**inventory, "machine": {**same, "cores": 4}})
    assert moved["compute"] is None and moved["local_rate_needed"]["why"] == (
        "measured on another machine (cores: 2 -> 4)"
    )
    assert fits["plan"]["peer-01"]["cpus_limit"] == pytest.approx(ROOM * rate(8) / 20 / 91.5, abs=1e-3)
    refused = testbed_experiment({"peers": "2", "time_dilation": "2"}, inventory)["errors"]
    smallest = ROOM * 2 * rate(8) / (1.75 * 91.5)  # both 8-vCPU containers, with headroom, in the budget
    assert any(f"use a factor >= {smallest:.2f}" in error for error in refused), refused


def test_the_one_thread_rate_is_measured_for_every_run_unless_reuse_is_asked_for(tmp_path):
    """D follows the machine the run has: an earlier run's rate is measured again, unless the run allows
    reusing one for local_rate_reuse_minutes and it is that recent."""
    from controller.plan import testbed_experiment

    inventory = {
        **_inventory(tmp_path, [8, 8]),
        "local_rate_fresh": False,
        "now": "2026-12-07T09:00:00+00:00",
    }
    cached = tmp_path / "local-rate" / "resnet18-bs32-n2.json"
    document = json.loads(cached.read_text())
    document["measured_on"]["measured_at"] = "2026-12-07T08:50:00+00:00"
    cached.write_text(json.dumps(document))
    again = testbed_experiment({"peers": "2"}, inventory)
    assert again["compute"] is None
    assert again["local_rate_needed"]["why"] == "measured for every run (local_rate_reuse_minutes=0)"
    reused = testbed_experiment({"peers": "2", "local_rate_reuse_minutes": "15"}, inventory)
    assert reused["local_rate_needed"] is None and reused["compute"]["local_rate_reused"] is True
    assert reused["compute"]["local_rate_measured_at"] == "2026-12-07T08:50:00+00:00"
    old = testbed_experiment({"peers": "2", "local_rate_reuse_minutes": "5"}, inventory)
    assert old["local_rate_needed"]["why"] == "measured 10 minutes ago, more than local_rate_reuse_minutes=5"
    # where the controller holds the run's dataset, the rate is measured on it (another file)
    (tmp_path / "datasets" / "fashion-mnist").mkdir(parents=True)
    held = testbed_experiment({"peers": "2", "dataset": "fashion-mnist"}, inventory)["local_rate_needed"]
    assert (held["dataset"], held["data_root"]) == (
        "fashion-mnist",
        str(tmp_path / "datasets" / "fashion-mnist"),
    )
    assert held["file"].endswith("resnet18-bs32-n2-fashion-mnist.json") and held["why"] == "not measured yet"


def test_linear_off_and_uncalibrated_models_keep_the_linear_model(tmp_path):
    from controller.plan import testbed_experiment

    inventory = _inventory(tmp_path, [8, 8])
    for raw in ({"calibration": "linear"}, {"time_dilation": "off"}):
        result = testbed_experiment({"peers": "2", **raw}, inventory)
        assert result["compute"] is None and result["plan"]["peer-01"]["cpus_limit"] == 0.875, raw
    smallcnn = testbed_experiment({"peers": "2", "model": "smallcnn"}, inventory)
    assert smallcnn["compute"] is None
    assert any("no rate for smallcnn at batch size 32 with 8 vCPUs" in w for w in smallcnn["warnings"])
    bad = testbed_experiment({"peers": "2", "calibration": str(tmp_path / "none.json")}, inventory)
    assert bad["errors"] and bad["errors"][0].startswith("calibration: ") and "none.json" in bad["errors"][0]


def test_solo_peers_are_planned_like_any_peers_and_get_no_averaging_settings(tmp_path):
    """strategy solo (a baseline per host, the no-communication reference): one container per peer, the
    calibrated CPU of its vCPUs, no Hivemind or DDP settings for the trainer."""
    from controller.plan import testbed_experiment

    solo = testbed_experiment({"strategy": "solo", "peers": "8"}, _inventory(tmp_path, [2] * 8))
    assert solo["errors"] == [] and len(solo["hosts"]) == 8
    assert {e["modelled_samples_per_second"] for e in solo["plan"].values()} == {rate(2)}
    assert "target_batch_size" not in solo["trainer_settings"]
    assert "matchmaking_time" not in solo["trainer_settings"]


def test_hivemind_peers_beyond_the_models_checks_are_warned_and_smaller_ones_are_not(tmp_path):
    """The model of a Hivemind peer held at 2 vCPUs and missed at 4 (its split) and 8 (+83 and
    +105 %); a plan at those sizes says so, one at 2 vCPUs or of solo peers does not."""
    from controller.calibration import ModelCheck, hivemind_model_caveat
    from controller.plan import testbed_experiment

    two = testbed_experiment({"peers": "8"}, _inventory(tmp_path, [2] * 8))
    assert two["errors"] == [] and not any("validated range" in w for w in two["warnings"])
    eight = testbed_experiment({"peers": "2"}, _inventory(tmp_path, [8, 8]))
    caveat = [w for w in eight["warnings"] if "validated range" in w]
    assert len(caveat) == 1 and "+105 %" in caveat[0] and "8 vCPUs a peer" in caveat[0], eight["warnings"]
    solo = testbed_experiment({"peers": "2", "strategy": "solo"}, _inventory(tmp_path, [8, 8]))
    assert not any("validated range" in w for w in solo["warnings"])
    # a size never checked is outside too; a check within 25 % but 10+ points off on the split is not valid
    assert "no check at 16 vCPUs" in hivemind_model_caveat(16)
    assert hivemind_model_caveat(4) is not None
    assert hivemind_model_caveat(4, (ModelCheck(4, 0.1, 5.0, "x"),)) is None
    assert "(controller/calibrations/model-checks.json)" in caveat[0]  # the record it rests on


def test_the_caveat_follows_the_committed_records(tmp_path):
    """The checks are read from the measurement records, not typed in code: a record appended (as the
    benchmarks do with --record) changes the caveat every plan and report prints."""
    import shutil

    from controller.calibration import (
        MODEL_CHECKS,
        append_model_check,
        hivemind_model_caveat,
        load_model_checks,
    )

    records = tmp_path / "model-checks.json"
    shutil.copy(MODEL_CHECKS, records)
    before = hivemind_model_caveat(8, source=records)
    assert "+105 %" in before and "(p2-luoff on the 16-core device: compute -57 %, 2026-11-28)" in before
    assert hivemind_model_caveat(4, source=records) is not None
    measured_on = {"machine": "test", "date": "2026-12-05", "torch": "2.14.1", "hivemind": "1.1.12"}
    append_model_check(
        {"vcpus": 8, "throughput_error": 0.08, "averaging_share_points": 4.0, "against": "a new device row",
         "measured_on": measured_on, "command": "python benchmarks/calibration_check.py R"},
        records,
    )  # fmt: skip
    assert len(load_model_checks(records)) == len(load_model_checks(MODEL_CHECKS)) + 1
    assert hivemind_model_caveat(8, source=records) is None  # the latest check at 8 vCPUs holds now
    after = hivemind_model_caveat(4, source=records)
    assert after.split(":")[0].endswith("(Hivemind peers of 1, 2, 8 vCPUs)")
    assert "up to 10 %" in after  # the worst latest error is 4 vCPUs' +10 %: 8's +105 % was superseded


def test_the_report_marks_dilated_hivemind_runs_outside_the_models_range(tmp_path):
    from controller.report.analysis import scale_model_caveat
    from controller.report.data import Experiment

    def experiment(strategy: str, vcpus: list[int], dilation: float, compute: dict | None) -> Experiment:
        hosts = {f"peer-{i:02d}": {"vcpus": v} for i, v in enumerate(vcpus, 1)}
        settings = {"strategy": strategy, "peers": len(vcpus), "vcpus": vcpus[0]}
        return Experiment("x", tmp_path, settings, True, hosts=hosts, time_dilation=dilation, compute=compute)

    calibrated = {"calibration_file": str(DEFAULT)}
    assert "+105 %" in scale_model_caveat(experiment("hivemind", [8, 8], 1.8, calibrated))
    assert "8 vCPUs a peer" in scale_model_caveat(
        experiment("hivemind", [2, 8], 1.8, calibrated)
    )  # the largest
    assert scale_model_caveat(experiment("hivemind", [2, 2], 4.7, calibrated)) is None
    assert scale_model_caveat(experiment("hivemind", [8, 8], 1.0, None)) is None  # real VMs: no model
    assert scale_model_caveat(experiment("solo", [8, 8], 1.8, calibrated)) is None


def test_a_calibrations_hivemind_rows_slow_multi_vcpu_peers_by_their_ratio_to_one_thread(tmp_path):
    """With `hivemind_compute` rows at 1 and 8 threads, an 8-vCPU Hivemind peer is modelled at
    ratio(8) / ratio(1) of its solo rate (the one-thread container already pays its own processes), the
    factor is recorded and the plan no longer warns for that size; solo peers keep the solo rate."""
    from controller.plan import testbed_experiment

    document = json.loads(DEFAULT.read_text())
    rows = [
        {"model": "resnet18", "batch_size": 32, "threads": t, "compute_ratio": r}
        for t, r in ((1, 0.8), (8, 0.4))
    ]
    calibration = tmp_path / "with-hivemind.json"
    calibration.write_text(json.dumps({**document, "hivemind_compute": rows}))
    inventory = _inventory(tmp_path, [8, 8])
    peers = testbed_experiment({"peers": "2", "calibration": str(calibration)}, inventory)
    assert peers["errors"] == [], peers["errors"]
    for entry in peers["plan"].values():
        assert entry["modelled_samples_per_second"] == pytest.approx(rate(8) * 0.5)
        assert entry["hivemind_compute_factor"] == pytest.approx(0.5)
    assert not any("validated range" in w for w in peers["warnings"])
    solo = testbed_experiment({"peers": "2", "strategy": "solo", "calibration": str(calibration)}, inventory)
    assert all(e["modelled_samples_per_second"] == rate(8) for e in solo["plan"].values())
    # a bad row is one error naming the file and the row
    calibration.write_text(json.dumps({**document, "hivemind_compute": [{**rows[0], "compute_ratio": 3}]}))
    with pytest.raises(CalibrationError, match=r"hivemind_compute\[0\]: compute_ratio must be in \(0, 2\]"):
        load(calibration)
