"""benchmarks/thread_scaling.py at CI size: 1 and 2 threads of SmallCNN on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.calibration import KIND, load

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # it measures the machine: never beside another test
def test_one_and_two_threads_are_measured_with_every_core_busy_and_written_as_a_calibration(tmp_path):
    out = tmp_path / "calibration.json"
    command = [sys.executable, "benchmarks/thread_scaling.py", "--threads", "1,2", "--model", "smallcnn"]
    command += ["--batch-sizes", "16", "--steps", "20", "--cores", "2", "--out", str(out)]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(run.stdout)
    calibration = load(out)  # what the controller reads
    assert calibration.measured_on["cores"] == 2 and calibration.measured_on["cpu_model"]
    rows = sorted(calibration.curve("smallcnn", 16).items())
    assert [threads for threads, _ in rows] == [1, 2]
    assert all(rate > 0 for _, rate in rows)
    # two 1-thread processes filled both cores at once, one 2-thread process filled them alone
    assert "1 threads x 2" in run.stdout and "2 threads x 1" in run.stdout
    assert "x 1 thread" in run.stdout and f"calibration written to {out}" in run.stdout


def test_more_threads_than_cores_is_one_error_before_anything_runs(tmp_path):
    command = [
        sys.executable,
        "benchmarks/thread_scaling.py",
        "--threads",
        "1,64",
        "--out",
        str(tmp_path / "c.json"),
    ]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "thread counts must be 1 to" in run.stderr
    assert not (tmp_path / "c.json").exists()


def test_repeats_are_combined_into_their_mean_with_every_repeat_kept(tmp_path):
    """`--combine`: two calibrations of one machine (as the shipped one was made) give one file whose rates
    are their means; a file that is not a calibration is one error and nothing is written."""
    row = {"model": "resnet18", "batch_size": 32, "threads": 1, "processes": 16, "source": "trainer"}
    files = []
    for index, (mean, low, high) in enumerate([(140.0, 110.0, 160.0), (160.0, 120.0, 180.0)]):
        document = {"kind": KIND, "measured_on": {"cores": 16, "date": f"2026-11-2{index}"}, "method": "m"}
        document["rates"] = [{**row, "samples_per_second": mean, "min": low, "max": high}]
        files.append(tmp_path / f"r{index}.json")
        files[-1].write_text(json.dumps(document))
    out = tmp_path / "combined.json"
    command = [sys.executable, "-m", "trainer", "calibrate", "--combine", *map(str, files), "--out", str(out)]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    calibration = load(out)
    assert calibration.curve("resnet18", 32) == {1: 150.0}
    assert calibration.measured_on["repeats"] == 2
    (written,) = json.loads(out.read_text())["rates"]
    assert written["repeats"] == [140.0, 160.0] and (written["min"], written["max"]) == (110.0, 180.0)
    assert "2 repeat(s)" in run.stdout and "150.0 (110.0-180.0)" in run.stdout

    files[1].write_text("{}")
    out.unlink()
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "not a calibration" in run.stderr and not out.exists()
