"""benchmarks/process_census.py's summary of samples written by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.process_census import summarise  # noqa: E402


def _process(pid: int, number: int, cpu: float) -> dict:
    return {"pid": pid, "kind": f"python child {number}", "threads": 4, "cpu_seconds": cpu, "environment": {}}


def test_a_child_keeps_its_number_when_an_earlier_one_ends_first():
    # three children (the DHT, two averagers); the first ends before the last sample, so that sample's
    # census numbers the other two 1 and 2
    trainer = {"pid": 100, "kind": "trainer", "threads": 8, "cpu_seconds": 0.0, "environment": {}}
    samples = [
        {
            "time": 0.0,
            "peers": {
                "peer-01": [trainer, _process(101, 1, 0.0), _process(102, 2, 0.0), _process(103, 3, 0.0)]
            },
        },
        {
            "time": 3.0,
            "peers": {
                "peer-01": [
                    {**trainer, "cpu_seconds": 3.0},
                    _process(101, 1, 1.5),
                    _process(102, 2, 0.3),
                    _process(103, 3, 0.6),
                ]
            },
        },
        {
            "time": 6.0,
            "peers": {
                "peer-01": [{**trainer, "cpu_seconds": 6.0}, _process(102, 1, 0.6), _process(103, 2, 1.2)]
            },
        },
    ]
    summary = summarise(samples)["peer-01"]
    assert set(summary) == {"trainer", "python child 1", "python child 2", "python child 3"}
    assert [summary[f"python child {n}"]["processes"] for n in (1, 2, 3)] == [1, 1, 1]
    assert summary["python child 1"]["cores"] == pytest.approx(0.5)  # pid 101 over the two samples it was in
    assert summary["python child 3"]["cores"] == pytest.approx(0.2)  # pid 103: 1.2 CPU seconds over 6 s
    assert summary["trainer"]["cores"] == pytest.approx(1.0)
