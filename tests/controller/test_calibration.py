"""controller.calibration: compute calibrations (issue #33), the shipped one and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.calibration import DEFAULT, KIND, CalibrationError, load


def test_the_shipped_calibration_is_the_16_core_machines_and_threads_do_not_add_up():
    calibration = load(DEFAULT)
    assert calibration.measured_on["cores"] == 16
    for batch_size in (32, 128):
        curve = calibration.curve("resnet18", batch_size)
        assert sorted(curve) == [1, 2, 4, 8, 16]
        speedups = [calibration.speedup("resnet18", batch_size, threads) for threads in sorted(curve)]
        assert speedups == sorted(speedups) and speedups[0] == 1.0
        assert speedups[-1] < 0.6 * 16, speedups  # far from linear: the reason the calibration exists


def _write(tmp_path, rates, **extra):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"kind": KIND, "measured_on": {"cores": 2}, "rates": rates, **extra}))
    return path


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
    from controller.report.analysis import ceiling_speedup
    from controller.report.data import Experiment

    calibration = load(DEFAULT)
    settings = {"model": "resnet18", "batch_size": 32, "vcpus": 8, "peers": 3}
    hosts = {"peer-01": {"vcpus": 8}, "peer-02": {"vcpus": 8}, "peer-03": {"vcpus": 4}}
    hivemind = Experiment("hm", Path("hm"), {**settings, "strategy": "hivemind"}, True, hosts=hosts)
    baseline = Experiment("base", Path("base"), {**settings, "strategy": "baseline", "vcpus": 16}, True)
    ceiling = ceiling_speedup(calibration, hivemind, [baseline])
    assert ceiling == pytest.approx((556 + 556 + 395) / 712)
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
