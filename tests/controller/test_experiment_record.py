"""experiment.json's schema, defined once (experiment/record.py): every writer goes through it."""

from __future__ import annotations

import json

import pytest

from experiment.record import (
    EXPERIMENT_FIELDS,
    EXPERIMENT_SCHEMA_VERSION,
    RecordError,
    experiment_record,
    read_experiment,
    write_experiment,
)

MINIMAL = {"experiment_id": "r1", "strategy": "hivemind", "peers": 2, "settings": {}, "complete": False}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"peers": "2"}, "peers must be int, not str"),
        ({"peers": True}, "peers must be int, not bool"),
        ({"complete": "true"}, "complete must be bool, not str"),
        ({"faults": {}}, "faults must be list, not dict"),
        ({"compelte": True}, "unknown fields compelte"),
    ],
)
def test_a_field_of_another_type_or_name_is_refused(change, says):
    with pytest.raises(RecordError, match=says):
        experiment_record(**{**MINIMAL, **change})


def test_every_required_field_is_asked_for():
    with pytest.raises(RecordError, match="missing settings, complete"):
        experiment_record(experiment_id="r1", strategy="baseline", peers=1)


def test_the_written_record_carries_its_version_and_reads_back(tmp_path):
    path = write_experiment(tmp_path / "r1", **MINIMAL, incomplete_reason=None, time_dilation=4.9)
    document = json.loads(path.read_text())
    assert document["schema_version"] == EXPERIMENT_SCHEMA_VERSION
    assert list(document)[:2] == ["schema_version", "experiment_id"]  # the schema's order
    assert read_experiment(tmp_path / "r1") == document


def test_a_record_from_before_the_schema_reads_as_version_0_and_a_broken_one_as_none(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "experiment.json").write_text(json.dumps(MINIMAL))
    assert read_experiment(tmp_path / "old")["schema_version"] == 0
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "experiment.json").write_text("{")
    assert read_experiment(tmp_path / "broken") is None
    assert read_experiment(tmp_path / "none") is None


def test_every_field_says_what_it_holds():
    names = [field.name for field in EXPERIMENT_FIELDS]
    assert len(names) == len(set(names))
    assert all(field.meaning and field.types for field in EXPERIMENT_FIELDS)
