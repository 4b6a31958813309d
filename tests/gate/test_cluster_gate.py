"""The gate's rules (tests/conftest.py): a cluster test is rerun once and listed with its first failure; a
unit test is never rerun; ``chance.expect`` records, keeps and prints, never fails a test."""

from __future__ import annotations

from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

PROBES = """
import pytest
from pathlib import Path

@pytest.mark.cluster
def test_cluster_fails_once(tmp_path_factory):
    mark = tmp_path_factory.getbasetemp() / "failed-once"
    if not mark.exists():
        mark.write_text("x")
        raise AssertionError("a first failure by chance")

@pytest.mark.cluster
def test_cluster_always_fails():
    raise AssertionError("a real failure")

def test_unit_fails():
    raise AssertionError("a unit failure")

@pytest.mark.cluster
def test_chance_is_recorded(chance):
    assert chance.expect(False, "rounds formed", {"ok": 0}) is False
    chance.expect(True, "no timeout")
"""


def test_cluster_tests_are_rerun_once_and_listed(pytester, monkeypatch, tmp_path):
    kept = tmp_path / "earlier.jsonl"  # one file a session
    monkeypatch.setenv("TESTBED_OBSERVATIONS_DIR", str(tmp_path))
    monkeypatch.setenv("TESTBED_TEST_SESSION", "earlier")
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    cluster: cluster\n    molecule: molecule\n")
    pytester.makepyfile(test_probes=PROBES)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 2, "failed": 2, "rerun": 2}
    out = result.stdout.str()
    assert "3 cluster test(s) run, 2 rerun(s)" in out
    assert "RERUN test_probes.py::test_cluster_fails_once (failed in call); its first failure:" in out
    assert "a first failure by chance" in out
    assert "RERUN test_probes.py::test_unit_fails" not in out  # unit tests are never rerun
    assert "2 recorded, 1 did not hold" in out
    recorded = "NOT HELD test_probes.py::test_chance_is_recorded: rounds formed  [{'ok': 0}]"
    assert recorded in out
    # kept across runs, a file a session: a second session's summary counts both, and so does the command
    assert len(kept.read_text().splitlines()) == 2
    monkeypatch.setenv("TESTBED_TEST_SESSION", "later")
    again = pytester.runpytest("-p", "no:cacheprovider", "-k", "chance")
    assert "rounds formed: held 0 of 2 in 2 session(s)" in again.stdout.str()
    assert "no timeout: held 2 of 2 in 2 session(s)" in again.stdout.str()
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["earlier.jsonl", "later.jsonl"]
    import observations

    assert observations.count_line(observations.last_sessions(tmp_path)) == (
        f"chance observations: 2 recorded, 1 did not hold ({tmp_path / 'later.jsonl'})"
    )
    assert observations.history_lines(observations.last_sessions(tmp_path, last=1)) == [
        "no timeout: held 1 of 1 in 1 session(s)",
        "rounds formed: held 0 of 1 in 1 session(s)",
    ]


def test_nothing_is_printed_without_cluster_tests(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    cluster: cluster\n")
    pytester.makepyfile(test_unit="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "cluster tests" not in result.stdout.str()
