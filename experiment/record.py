"""experiment.json, the record of one experiment (its peers' files are experiment/results.py's): the fields,
their types and meanings, defined once; every writer builds the document through ``experiment_record`` and
every reader opens it with ``read_experiment``. Standard library only: the playbooks' filters import it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiment.results import write_json_atomic

#: one per experiment, beside the peers' directories: written by playbooks/report.yml (the filter
#: testbed_experiment_record), by controller/failure.py for a run that failed, and by the benchmarks that
#: write results trainer report reads; read by trainer report and trainer grid
EXPERIMENT_FILE = "experiment.json"
#: raised when a field changes meaning or type; a reader meets older records without the field (version 0)
EXPERIMENT_SCHEMA_VERSION = 1
_NUMBER = (int, float)
_OPTIONAL_DICT = (dict, type(None))


@dataclass(frozen=True)
class RecordField:
    """One field of experiment.json: its name, the JSON types it may hold, whether every record has it."""

    name: str
    types: tuple[type, ...]
    meaning: str
    required: bool = False


EXPERIMENT_FIELDS: tuple[RecordField, ...] = (
    RecordField("schema_version", (int,), "this schema's version (EXPERIMENT_SCHEMA_VERSION)", True),
    RecordField("experiment_id", (str,), "the run's id, its directory's name (Hivemind's run id)", True),
    RecordField("strategy", (str,), "how the peers trained (experiment/variables.py STRATEGIES)", True),
    RecordField("peers", (int,), "peers that trained (a baseline: 1)", True),
    RecordField("settings", (dict,), "every experiment variable's value (experiment/variables.py)", True),
    RecordField("complete", (bool,), "every peer completed (a peer killed on purpose excused)", True),
    RecordField("incomplete_reason", (str, type(None)), "why not complete, one clause per problem"),
    RecordField("failed", (dict,), "a run that failed: per host, the play, the task and the cause"),
    RecordField("trainer_settings", (dict,), "the settings handed to the trainers as flags"),
    RecordField("time_dilation", _NUMBER, "D: measured times divided by D are the modelled machine's"),
    RecordField("compute", _OPTIONAL_DICT, "the compute calibration the containers' CPU followed"),
    RecordField("inventory", (str,), "which inventory ran it (local, opennebula, ...)"),
    RecordField("local_cluster", (bool,), "whether the hosts were the local cluster's containers"),
    RecordField("hosts", (dict,), "per host: the plan, the CPU it received, its links and kernel"),
    RecordField("cpu_fairness", (dict,), "whether equal peers received equal CPU"),
    RecordField("speed_fairness", (dict,), "whether equal peers trained at equal speed"),
    RecordField(
        "received_compute",
        _OPTIONAL_DICT,
        "each peer's compute against its calibration (received_compute.py)",
    ),
    RecordField("storage", (dict,), "where the peers read the dataset from"),
    RecordField("bootstrap", _OPTIONAL_DICT, "Hivemind: who started the DHT (and the DHT node's record)"),
    RecordField("lighthouse", _OPTIONAL_DICT, "DiLoCo: the Lighthouse's host, endpoint and log"),
    RecordField("network", _OPTIONAL_DICT, "the bandwidth measured between the peers"),
    RecordField("faults", (list,), "each planned fault with what happened (docs/faults.md)"),
    RecordField("churn", _OPTIONAL_DICT, "the drawn churn (docs/faults.md)"),
    RecordField("expected_incomplete", (list,), "problems excused by a planned fault"),
    RecordField("clocks", (dict,), "every host's clock against the controller's at the start"),
    RecordField("warnings", (list,), "what makes the run less than it set out to be"),
    RecordField(
        "host_load", _OPTIONAL_DICT, "what else loaded the controller's machine during the run (host_load.py)"
    ),
    RecordField("started", (str, *_NUMBER, type(None)), "when the run started (ISO 8601 UTC, or Unix time)"),
    RecordField("finished", (str, *_NUMBER), "when the record was written"),
    # written by benchmarks/study_scale.py, which places processes on cores itself
    RecordField("run_id", (str,), "the trainers' run id where it differs from experiment_id"),
    RecordField("placement", (dict,), "the cores each process was pinned to"),
    RecordField("machine", (dict,), "the machine the benchmark ran on"),
)
_EXPERIMENT_TYPES = {f.name: f.types for f in EXPERIMENT_FIELDS}


class RecordError(ValueError):
    """A record that does not follow EXPERIMENT_FIELDS."""


def experiment_record(**values: Any) -> dict[str, Any]:
    """experiment.json's document: ``values`` checked against EXPERIMENT_FIELDS (every required one, no
    unknown name, each of its types), in the schema's order, with this schema's version.

    >>> record = experiment_record(
    ...     experiment_id="r1", strategy="baseline", peers=1, settings={}, complete=True
    ... )
    >>> record["schema_version"], list(record)[:3]
    (1, ['schema_version', 'experiment_id', 'strategy'])
    >>> experiment_record(experiment_id="r1", strategy="baseline", peers="1", settings={}, complete=True)
    Traceback (most recent call last):
    ...
    experiment.record.RecordError: experiment.json: peers must be int, not str ('1')
    """
    values = {"schema_version": EXPERIMENT_SCHEMA_VERSION, **values}
    unknown = sorted(set(values) - set(_EXPERIMENT_TYPES))
    if unknown:
        raise RecordError(f"experiment.json: unknown fields {', '.join(unknown)} (experiment/record.py)")
    missing = [f.name for f in EXPERIMENT_FIELDS if f.required and f.name not in values]
    if missing:
        raise RecordError(f"experiment.json: missing {', '.join(missing)}")
    for name, value in values.items():
        types = _EXPERIMENT_TYPES[name]
        # a bool is an int to Python, never to the schema
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise RecordError(
                f"experiment.json: {name} must be {expected}, not {type(value).__name__} ({value!r:.60})"
            )
    return {f.name: values[f.name] for f in EXPERIMENT_FIELDS if f.name in values}


def write_experiment(directory: str | os.PathLike[str], **values: Any) -> Path:
    """Check and write ``<directory>/experiment.json`` atomically; returns its path."""
    path = Path(directory) / EXPERIMENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, experiment_record(**values))
    return path


def read_experiment(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``<directory>/experiment.json``, None where there is none or it does not parse (a record written
    before the schema had a version reads as version 0)."""
    try:
        document = json.loads((Path(directory) / EXPERIMENT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    document.setdefault("schema_version", 0)
    return document
