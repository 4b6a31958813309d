"""Where a grid stands: which experiments have complete results, and the per-run status file.

The truth about a finished experiment is its `results/<experiment_id>/experiment.json` (written by the
experiment playbook, docs/architecture.md): a run is done when that file says ``complete: true``. The status
file `results/grid-<name>.status.json` records what the runner did with each run (status, times, return code,
log), so a user can see what failed and why; it is rewritten atomically after every change.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from controller.grid.spec import Grid, Run
from experiment.record import read_experiment

#: states a run can be in, as recorded in the status file
STATES = ("pending", "running", "complete", "failed", "interrupted", "skipped")


def experiment_complete(results_dir: Path, experiment_id: str) -> bool:
    """True when the experiment playbook recorded complete results for `experiment_id`."""
    document = read_experiment(results_dir / experiment_id)
    return bool(document) and is_true(document.get("complete"))


def is_true(value: Any) -> bool:
    """experiment.json's ``complete``: a JSON true (a templated "True"/"true" string is accepted too)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


@dataclass
class RunStatus:
    """What happened to one run (times are Unix seconds)."""

    index: int
    experiment_id: str
    block: str
    repeat: int
    settings: dict[str, Any]
    status: str = "pending"
    attempts: int = 0
    started: float | None = None
    finished: float | None = None
    seconds: float | None = None
    runner_status: str | None = None
    rc: int | None = None
    message: str = ""
    log: str | None = None
    #: complete attempts whose received compute strayed outside the grid's limit: where each was set aside
    #: and why (the grid ran the run again)
    set_aside: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class GridStatus:
    """The status file of one grid."""

    path: Path
    grid: str
    grid_file: str
    runs: dict[str, RunStatus] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, grid: Grid) -> GridStatus:
        """Read the status file (if any) and align it with the grid's runs."""
        status = cls(path=path, grid=grid.name, grid_file=str(grid.path))
        previous: dict[str, Any] = {}
        try:
            previous = json.loads(path.read_text()).get("runs", {})
        except (OSError, ValueError, AttributeError):
            previous = {}
        for run in grid.runs:
            record = RunStatus(run.index, run.experiment_id, run.block, run.repeat, run.settings)
            old = previous.get(run.experiment_id)
            if isinstance(old, dict):
                for key in ("status", "attempts", "started", "finished", "seconds", "runner_status", "rc"):
                    if key in old:
                        setattr(record, key, old[key])
                record.message = old.get("message", "")
                record.log = old.get("log")
                record.set_aside = list(old.get("set_aside") or [])
            status.runs[run.experiment_id] = record
        return status

    def update(self, run: Run, **changes: Any) -> RunStatus:
        record = self.runs[run.experiment_id]
        for key, value in changes.items():
            setattr(record, key, value)
        self.save()
        return record

    def save(self) -> None:
        document = {
            "grid": self.grid,
            "grid_file": self.grid_file,
            "updated": time.time(),
            "counts": {state: sum(r.status == state for r in self.runs.values()) for state in STATES},
            "runs": {key: asdict(record) for key, record in self.runs.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(partial, self.path)
