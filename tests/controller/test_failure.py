"""A run that failed after validation is recorded once in its experiment.json (controller/failure.py)."""

import json
import time

from controller.failure import write_failure_record

FAILURES = {"peer-01": {"play": "Measure the bandwidth", "task": "Receive", "cause": "Address in use"}}


def _experiment(tmp_path, **extra):
    return {
        "experiment_id": "x1",
        "results_dir": str(tmp_path / "x1"),
        "settings": {"strategy": "hivemind"},
        "hosts": ["peer-01", "peer-02"],
        "errors": [],
        **extra,
    }


def test_a_failed_run_is_recorded_with_its_host_and_cause(tmp_path):
    path = write_failure_record(_experiment(tmp_path), FAILURES, time.time())
    document = json.loads(path.read_text())
    assert path == tmp_path / "x1" / "experiment.json"
    assert document["complete"] is False and document["peers"] == 2 and document["strategy"] == "hivemind"
    assert document["failed"] == FAILURES
    assert document["incomplete_reason"] == (
        "the run failed on peer-01 in 'Measure the bandwidth / Receive': Address in use"
    )


def test_a_record_is_not_written_over_complete_results_this_runs_own_or_before_validation(tmp_path):
    started = time.time()
    assert write_failure_record(_experiment(tmp_path, errors=["bad"]), FAILURES, started) is None
    assert write_failure_record({**_experiment(tmp_path), "results_dir": None}, FAILURES, started) is None
    assert not (tmp_path / "x1").exists()
    record = tmp_path / "x1" / "experiment.json"
    record.parent.mkdir()
    record.write_text('{"complete": true}')
    assert write_failure_record(_experiment(tmp_path), FAILURES, time.time() + 60) is None  # complete
    assert write_failure_record(_experiment(tmp_path), FAILURES, started - 60) is None  # written by this run
    assert json.loads(record.read_text()) == {"complete": True}
    record.write_text('{"complete": false}')
    earlier_failure = write_failure_record(_experiment(tmp_path), FAILURES, time.time() + 60)
    assert earlier_failure == record
    assert json.loads(record.read_text())["failed"] == FAILURES
