"""trainer.cpuprobe: the CPU-under-load probe playbooks/cpu.yml runs on every peer at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from trainer import cpuprobe


# It measures the machine, so it runs in the serial pass (marker slow): beside another test worker, two
# spinning workers got 1.17 cores (a clean-clone `make test`, 2026-11-25).
@pytest.mark.slow
def test_two_workers_get_more_than_one_and_both_start_together():
    """The machine has 2 cores: two spinning workers receive clearly more than one core between them (a probe
    that counted only itself, or ran the workers one after the other, would not)."""
    start_at = time.time() + 0.5
    result = cpuprobe.probe(2, 1.0, start_at)
    assert result["workers"] == 2 and result["late_seconds"] < 0.2, result
    assert 1.0 <= result["seconds"] < 1.5, result
    assert 1.2 < result["cores_used"] <= 2.1, result
    assert result["cpu_seconds"] == pytest.approx(result["cores_used"] * result["seconds"], rel=0.01)


def test_a_probe_started_after_its_time_says_how_late_and_still_measures_a_full_window():
    result = cpuprobe.probe(1, 0.3, time.time() - 2)
    assert result["late_seconds"] >= 2 and result["seconds"] >= 0.3, result


def test_command_line_prints_one_json_line():
    completed = subprocess.run(
        [sys.executable, "-m", "trainer", "cpuprobe", "--workers", "1", "--seconds", "0.3"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    result = json.loads(completed.stdout)
    assert result["workers"] == 1 and 0 < result["cores_used"] <= 1.1, result


@pytest.mark.parametrize("flags", [["--workers", "0"], ["--seconds", "-1"], ["--workers", "two"]])
def test_bad_flags_are_one_line_errors(flags):
    completed = subprocess.run(
        [sys.executable, "-m", "trainer", "cpuprobe", *flags], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2, completed
    error = completed.stderr
    assert error.count("\n") == 1 and error.startswith("trainer: error:"), error
