"""What a grid's runs will cost on this machine, from the runs it has already made.

A run's estimate is the mean playbook time of the grid's complete runs of the same shape (strategy, peers,
vCPUs a peer, local updates) and batch size, scaled by the samples each peer trains (``max_steps`` x
``batch_size``); where no run of that batch size is complete, the shape's runs of any batch size (a dilated
run's wall time per sample grows with the batch size, as its D does: a first estimate, not a measurement). The
seconds are the status file's (controller/grid/status.py): the whole playbook run, set-up and finish
included, as measured on the machine that ran them. A shape the grid has not run yet has no estimate: run
one repeat of every setting first (``--only "repeat == 1"``), then the dry run prices the rest.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from controller.grid.spec import Run
from controller.grid.status import RunStatus
from experiment.variables import BY_NAME


def _setting(settings: dict[str, Any], var: str) -> Any:
    return settings.get(var, BY_NAME[var].default)


def shape(settings: dict[str, Any]) -> tuple[Any, ...]:
    """What sets a run's cost per sample here: the strategy, the cluster (peers x vCPUs), local updates."""
    strategy = _setting(settings, "strategy")
    peers = 1 if strategy == "baseline" else _setting(settings, "peers")
    return strategy, peers, settings.get("vcpus"), bool(_setting(settings, "local_updates"))


def samples_per_peer(settings: dict[str, Any]) -> int:
    return int(_setting(settings, "max_steps")) * int(_setting(settings, "batch_size"))


@dataclass(frozen=True)
class Estimates:
    """Per run id its estimated seconds (None: no complete run of its shape yet)."""

    seconds: dict[str, float | None]
    measured: dict[str, float]  # the complete runs' own seconds

    def total(self, runs: list[Run]) -> tuple[float, int]:
        """(estimated seconds of ``runs`` still to run, how many of them have no estimate)."""
        todo = [run for run in runs if run.experiment_id not in self.measured]
        known = [self.seconds[run.experiment_id] for run in todo]
        return sum(s for s in known if s is not None), sum(s is None for s in known)


def estimate(runs: list[Run], status: dict[str, RunStatus], complete: set[str]) -> Estimates:
    """Estimates of ``runs`` from the status records of the ``complete`` ones.

    >>> def run(i, peers, steps):
    ...     settings = {"strategy": "hivemind", "peers": peers, "vcpus": 16 // peers, "max_steps": steps}
    ...     return Run(i, "b", 1, settings, f"r{i}")
    >>> runs = [run(1, 2, 100), run(2, 2, 200), run(3, 8, 100)]
    >>> done = {"r1": RunStatus(1, "r1", "b", 1, runs[0].settings, "complete", seconds=300.0)}
    >>> e = estimate(runs, done, {"r1"})
    >>> e.seconds
    {'r1': 300.0, 'r2': 600.0, 'r3': None}
    >>> e.total(runs)
    (600.0, 1)
    >>> big = {**runs[0].settings, "batch_size": 128, "max_steps": 25}  # as many samples as r1, at batch 128
    >>> runs += [Run(4, "b", 1, big, "r4"), Run(5, "b", 2, big, "r5")]
    >>> done["r4"] = RunStatus(4, "r4", "b", 1, big, "complete", seconds=900.0)
    >>> estimate(runs, done, {"r1", "r4"}).seconds["r5"]  # from the run of its batch size, not r1's 300 s
    900.0
    """
    per_sample: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    measured = {}
    for run in runs:
        record = status.get(run.experiment_id)
        if run.experiment_id in complete and record is not None and record.seconds:
            measured[run.experiment_id] = float(record.seconds)
            rate = float(record.seconds) / samples_per_peer(run.settings)
            per_sample[shape(run.settings)].append(rate)
            per_sample[(*shape(run.settings), _setting(run.settings, "batch_size"))].append(rate)
    seconds: dict[str, float | None] = {}
    for run in runs:
        key = shape(run.settings)
        rates = per_sample.get((*key, _setting(run.settings, "batch_size"))) or per_sample.get(key)
        if run.experiment_id in measured:
            seconds[run.experiment_id] = measured[run.experiment_id]
        elif rates:
            seconds[run.experiment_id] = sum(rates) / len(rates) * samples_per_peer(run.settings)
        else:
            seconds[run.experiment_id] = None
    return Estimates(seconds, measured)
