"""benchmarks/link_delay_fidelity.py at a tiny size (needs root): it measures every setting it is given, with
the delay's programs' counts, and writes them; the figures themselves are the benchmark's business."""

from __future__ import annotations

import doctest
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import link_delay_fidelity  # noqa: E402


def test_docstring_examples():
    result = doctest.testmod(link_delay_fidelity)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_each_setting_is_measured_and_written(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    argv = ["--dilation", "2", "--rate-mbit", "200", "--round-trips-ms", "0,10", "--jitter-fractions", "0",
            "--pings", "5", "--seconds", "1", "--out", str(out)]  # fmt: skip
    assert link_delay_fidelity.main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["modelled"]["round_trip_ms"] for r in results] == [0.0, 10.0]
    undelayed, delayed = results
    assert delayed["applied"] == {"rate_mbit": 100.0, "one_way_ms": 10.0, "jitter_ms": 0.0}
    assert undelayed["delay_programs"] == [] and len(delayed["delay_programs"]) == 2
    # a round trip of the delayed link waited at both receivers
    assert delayed["round_trip_ms"]["p5"] >= delayed["set_round_trip_ms"] > undelayed["round_trip_ms"]["p95"]
    assert all("packets=" in line and "cpu_seconds=" in line for line in delayed["delay_programs"])
    assert "RTT set" in capsys.readouterr().out
