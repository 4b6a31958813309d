"""Load a results directory for the report: one `Experiment` per `results/<experiment_id>/`.

An experiment directory holds `experiment.json` (written by the experiment playbook: strategy, peers,
settings, complete) and one subdirectory per peer (`peer-01`, ... or `baseline`) with the trainer's
files. The settings the report groups by come from `experiment.json`'s ``settings``, completed from the
first peer's `config.json` (what the trainer actually ran with); a directory without `experiment.json`
whose subdirectories hold trainer results is read from the `config.json` files alone, so results of plain
``trainer run`` calls can be reported too.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.grid.spec import NOISE_FLOOR_BLOCK
from controller.grid.status import is_true
from experiment.record import read_experiment
from experiment.results import (
    EVAL_COLUMNS,
    ROUND_COLUMNS,
    STEP_COLUMNS,
    STEPS_FILE,
    is_complete,
    read_config,
    read_evals,
    read_rejoins,
    read_rounds,
    read_steps,
    read_summary,
)
from experiment.variables import (
    DATA_PARALLEL_STRATEGIES,
    DEFAULT_SYNC_EVERY,
    DEFAULT_ZERO_STAGE,
    SETTING_VARIABLES,
    setting_identity,
)


@dataclass
class PeerRun:
    """One peer's raw rows (dicts keyed by experiment.results' column names)."""

    name: str
    steps: list[dict[str, Any]]
    rounds: list[dict[str, Any]]
    complete: bool
    summary: dict[str, Any] = field(default_factory=dict)
    #: evals.csv (validation loss and accuracy every `eval_every` steps; empty when the run evaluated never)
    evals: list[dict[str, Any]] = field(default_factory=list)
    #: rejoins.jsonl: each time a restarted trainer rejoined the run, and what its state download cost
    rejoins: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Experiment:
    experiment_id: str
    path: Path
    settings: dict[str, Any]
    complete: bool
    peers: list[PeerRun] = field(default_factory=list)
    bandwidth_bytes_per_second: float | None = None
    #: the median of the bandwidth probe's one-byte round trips, ms (experiment.json's network.round_trip_ms)
    round_trip_ms: float | None = None
    #: experiment.json's ``hosts``: per peer its plan (vcpus, bandwidth_mbit, ...) and the CPU it received
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: experiment.json's ``faults``: each planned fault with its status and actual times (docs/faults.md)
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: D of the run (trainer/dilation.py): the rows above are already in modelled time (``in_modelled_time``)
    time_dilation: float = 1.0
    #: experiment.json's ``compute``: the calibration the local containers' CPU followed (None: linear)
    compute: dict[str, Any] | None = None
    #: experiment.json's ``clocks``: every host's clock against the controller's at the start, its warnings
    clocks: dict[str, Any] = field(default_factory=dict)
    #: experiment.json's ``host_load``: what else loaded the controller's machine during the run (None: not
    #: recorded)
    host_load: dict[str, Any] | None = None
    #: experiment.json's ``received_compute``: each peer's compute against the calibration, measured from its
    #: steps (controller/received_compute.py; None: no calibration, or recorded before it was measured)
    received_compute: dict[str, Any] | None = None
    #: what tells its setting's label from another setting's of the same label (``distinguish_labels``)
    label_suffix: str = ""

    @property
    def strategy(self) -> str:
        return str(self.settings.get("strategy", "hivemind"))

    @property
    def is_baseline(self) -> bool:
        return self.strategy == "baseline"

    @property
    def peer_count(self) -> int:
        return int(self.settings.get("peers") or len(self.peers) or 1)

    @property
    def total_vcpus(self) -> float | None:
        vcpus = self.settings.get("vcpus")
        return None if vcpus is None else float(vcpus) * (1 if self.is_baseline else self.peer_count)

    def setting_key(self) -> tuple[tuple[str, Any], ...]:
        """Identifies a setting: experiments with equal keys are repeats of each other (every variable that
        defines a setting, experiment/variables.py)."""
        return setting_identity(self.settings)

    @property
    def is_noise_floor(self) -> bool:
        """A grid's noise-floor run (controller/grid/spec.py): a measurement of the testbed, not a setting."""
        return self.experiment_id.startswith(f"{NOISE_FLOOR_BLOCK}-")

    def comparison_key(self) -> tuple[Any, ...]:
        """Hivemind runs are compared with the baselines that share model, data, batch size and LR."""
        return tuple(self.settings.get(key) for key in ("model", "dataset", "batch_size", "learning_rate"))

    def strategy_label(self) -> str:
        """The strategy, with DeepSpeed's ZeRO stage (``deepspeed-z2``): each stage is a strategy of its own
        in every comparison."""
        if self.strategy == "deepspeed":
            stage = self.settings.get("zero_stage") or DEFAULT_ZERO_STAGE
            return f"deepspeed-z{stage}"
        return str(self.strategy)

    def label(self) -> str:
        """A short human label of the setting (without the id); unique among the settings of one report."""
        return self._base_label() + self.label_suffix

    def _base_label(self) -> str:
        s = self.settings
        if self.is_baseline:
            return f"baseline bs{s.get('batch_size')} lr{s.get('learning_rate')}{self._data_label()}"
        if self.strategy == "diloco":  # H, the inner steps between syncs, is what sets its communication
            every = s.get("sync_every") or DEFAULT_SYNC_EVERY
            return f"diloco {self.peer_count}p bs{s.get('batch_size')} H{every}"
        if self.strategy in (*DATA_PARALLEL_STRATEGIES, "solo"):
            return f"{self.strategy_label()} {self.peer_count}p bs{s.get('batch_size')}"
        lu = {True: " LU", False: " noLU"}.get(s.get("local_updates"), "")
        link = f" {float(s['bandwidth_mbit']):g}Mbit" if s.get("bandwidth_mbit") else ""
        # the timeouts (grids/timeouts.yml varies them), in the modelled machine's seconds
        timeouts = (
            f" mm{float(s['matchmaking_time']):g}/at{float(s['averaging_timeout']):g}"
            if s.get("matchmaking_time") and s.get("averaging_timeout")
            else ""
        )
        churn = " churn" if s.get("churn") else ""
        churn += " cross" if s.get("cross_traffic") else ""
        compression = f" {s['compression']}" if s.get("compression") not in (None, "none") else ""
        return f"{self.peer_count}p tbs{s.get('target_batch_size')}{lu}{link}{timeouts}{compression}{churn}"

    def data_pipeline(self) -> tuple[str, int]:
        """(an image folder's preprocessing, "" for in-memory datasets; DataLoader workers)."""
        s = self.settings
        preprocessing = (s.get("preprocessing") or "decode") if s.get("dataset") == "imagefolder" else ""
        return preprocessing, int(s.get("data_workers") or 0)

    def _data_label(self) -> str:
        """The data pipeline where it is not the default, for the label."""
        preprocessing, workers = self.data_pipeline()
        return (f" {preprocessing}" if preprocessing else "") + (f" w{workers}" if workers else "")


def load_experiments(results_dir: Path) -> list[Experiment]:
    """Every experiment below `results_dir` that has at least one peer with steps, sorted by id."""
    experiments = []
    for path in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        experiment = load_experiment(path)
        if experiment is not None and any(peer.steps for peer in experiment.peers):
            experiments.append(experiment)
    return distinguish_labels(experiments)


def distinguish_labels(experiments: list[Experiment]) -> list[Experiment]:
    """Give settings that share a short label the variables they differ in (``zero_stage=3``,
    ``latency_ms=20``), so that every table's row of one setting is told from another's.

    >>> runs = [Experiment(str(n), Path("."), {"strategy": "hivemind", "peers": 2, "latency_ms": n}, True)
    ...         for n in (None, 20.0)]
    >>> [e.label() for e in distinguish_labels(runs)]
    ['2p tbsNone', '2p tbsNone latency_ms=20']
    """
    by_label: dict[str, list[Experiment]] = {}
    for e in experiments:
        by_label.setdefault(e._base_label(), []).append(e)
    for group in by_label.values():
        keys = list(dict.fromkeys(e.setting_key() for e in group))
        if len(keys) < 2:
            continue
        differing = [i for i in range(len(keys[0])) if len({key[i][1] for key in keys}) > 1]
        for e in group:
            key = e.setting_key()
            e.label_suffix = "".join(f" {key[i][0]}={key[i][1]}" for i in differing if key[i][1] is not None)
    return experiments


def load_experiment(path: Path) -> Experiment | None:
    peer_dirs = sorted(p for p in path.iterdir() if p.is_dir() and (p / STEPS_FILE).exists())
    if not peer_dirs:
        return None
    document = read_experiment(path) or {}
    configs = [read_config(peer_dir) or {} for peer_dir in peer_dirs]
    settings: dict[str, Any] = {}
    settings.update({key: configs[0][key] for key in SETTING_VARIABLES if key in configs[0]})
    settings.update(document.get("settings") or {})
    for key in ("strategy", "peers"):
        if document.get(key) is not None:
            settings[key] = document[key]
    settings.setdefault("peers", len(peer_dirs))
    peers = [
        PeerRun(
            peer_dir.name,
            read_steps(peer_dir),
            read_rounds(peer_dir),
            is_complete(peer_dir),
            read_summary(peer_dir) or {},
            read_evals(peer_dir),
            read_rejoins(peer_dir),
        )
        for peer_dir in peer_dirs
    ]
    complete = is_true(document["complete"]) if "complete" in document else all(p.complete for p in peers)
    network = document.get("network")
    bandwidth = network.get("bandwidth_bytes_per_second") if isinstance(network, dict) else None
    trips = network.get("round_trip_ms") if isinstance(network, dict) else None
    experiment = Experiment(
        experiment_id=str(document.get("experiment_id") or path.name),
        path=path,
        settings=settings,
        complete=complete,
        peers=peers,
        bandwidth_bytes_per_second=float(bandwidth) if bandwidth else None,
        round_trip_ms=statistics.median(float(ms) for ms in trips) if trips else None,
        hosts=hosts if isinstance(hosts := document.get("hosts"), dict) else {},
        faults=[f for f in document.get("faults") or [] if isinstance(f, dict)],
        compute=compute if isinstance(compute := document.get("compute"), dict) else None,
        clocks=clocks if isinstance(clocks := document.get("clocks"), dict) else {},
        host_load=load if isinstance(load := document.get("host_load"), dict) else None,
        received_compute=got if isinstance(got := document.get("received_compute"), dict) else None,
    )
    experiment = on_training_clock(experiment)
    factor = float(document.get("time_dilation") or configs[0].get("time_dilation") or 1.0)
    return in_modelled_time(experiment, factor) if factor > 1 else experiment


def on_training_clock(experiment: Experiment) -> Experiment:
    """Every peer's rows on its training clock: ``wall_seconds`` less the validation passes before it
    (steps.csv's ``validation_seconds``, evals.csv's ``eval_seconds``), so that throughput and time to target
    count training alone (docs/statistics.md). Files without those columns keep their clock: their validation
    is inside it.

    >>> steps = [{"wall_seconds": 10.0, "validation_seconds": 0.0}, {"wall_seconds": 20.0,
    ...          "validation_seconds": 4.0}]
    >>> evals = [{"wall_seconds": 14.0, "eval_seconds": 4.0}]
    >>> rounds = [{"wall_seconds": 16.0}, {"wall_seconds": 21.0}]
    >>> run = Experiment("x", Path("x"), {}, True, [PeerRun("p", steps, rounds, True, {}, evals)])
    >>> peer = on_training_clock(run).peers[0]
    >>> [r["wall_seconds"] for r in (*peer.steps, *peer.evals, *peer.rounds)]
    [10.0, 16.0, 10.0, 12.0, 17.0]
    """

    def steps_clock(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**row, "wall_seconds": row["wall_seconds"] - float(row.get("validation_seconds") or 0.0)}
            if row.get("wall_seconds") is not None
            else row
            for row in rows
        ]

    def evals_clock(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        paused, moved = 0.0, []
        for row in rows:
            paused += float(row.get("eval_seconds") or 0.0)
            wall = row.get("wall_seconds")
            moved.append(row if wall is None else {**row, "wall_seconds": wall - paused})
        return moved

    def rounds_clock(rows: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        marks = sorted(
            (float(s["wall_seconds"]), float(s.get("validation_seconds") or 0.0))
            for s in steps
            if s.get("wall_seconds") is not None
        )
        moments = [wall for wall, _ in marks]
        moved = []
        for row in rows:
            wall = row.get("wall_seconds")
            if wall is None or not marks:
                moved.append(row)
                continue
            # the pauses before the round: those recorded by the last step that ended after it
            later = bisect.bisect_left(moments, float(wall))
            paused = marks[min(later, len(marks) - 1)][1]
            moved.append({**row, "wall_seconds": wall - paused})
        return moved

    if not any(row.get("validation_seconds") for peer in experiment.peers for row in peer.steps):
        return experiment
    peers = [
        dataclasses.replace(
            p, steps=steps_clock(p.steps), evals=evals_clock(p.evals), rounds=rounds_clock(p.rounds, p.steps)
        )
        for p in experiment.peers
    ]
    return dataclasses.replace(experiment, peers=peers)


#: steps.csv/rounds.csv/evals.csv columns in seconds; ``timestamp`` (Unix time) is rebased instead
_DURATION_COLUMNS = tuple(
    dict.fromkeys(c for c in (*STEP_COLUMNS, *ROUND_COLUMNS, *EVAL_COLUMNS) if c.endswith("_seconds"))
)
#: rates over a duration: a dilated run's are D times slower than the modelled machine's
_RATE_COLUMNS = tuple(c for c in ROUND_COLUMNS if c.endswith("_per_second"))
_FAULT_MOMENTS = ("started", "applied_at", "healed_at")
_REJOIN_MOMENTS = ("killed_at", "restarted_at", "process_started_at", "rejoined_at")
_REJOIN_DURATIONS = ("progress_wait_seconds", "state_download_seconds")


def in_modelled_time(experiment: Experiment, factor: float) -> Experiment:
    """The experiment as the modelled machine saw it (a run dilated by ``factor``): durations / factor, Unix
    times rebased to pass ``factor`` times faster from the run's first moment, the link ``factor`` times
    faster, each summary its ``modelled`` view, each fault its planned (modelled) times.

    >>> rows = [{"timestamp": 1000.0, "step_seconds": 8.0}, {"timestamp": 1016.0, "step_seconds": 8.0}]
    >>> e = in_modelled_time(Experiment("x", Path("x"), {}, True, [PeerRun("p", rows, [], True)]), 8.0)
    >>> e.peers[0].steps, e.time_dilation
    ([{'timestamp': 1000.0, 'step_seconds': 1.0}, {'timestamp': 1002.0, 'step_seconds': 1.0}], 8.0)
    """
    moments = [r["timestamp"] for p in experiment.peers for r in (*p.steps, *p.rounds) if r.get("timestamp")]
    origin = min(moments, default=0.0)

    def rows(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
        scaled = []
        for row in table:
            row = dict(row)
            for name in _DURATION_COLUMNS:
                if row.get(name) is not None:
                    row[name] = row[name] / factor
            for name in _RATE_COLUMNS:
                if row.get(name) is not None:
                    row[name] = row[name] * factor
            if row.get("timestamp") is not None:
                row["timestamp"] = origin + (row["timestamp"] - origin) / factor
            scaled.append(row)
        return scaled

    def fault(record: dict[str, Any]) -> dict[str, Any]:
        record = {**record, **(record.get("modelled") or {})}
        for name in _FAULT_MOMENTS:
            if record.get(name) is not None:
                record[name] = origin + (float(record[name]) - origin) / factor
        for name in ("applied_seconds", "healed_seconds"):  # from the barrier's release: durations
            if record.get(name) is not None:
                record[name] = float(record[name]) / factor
        if record.get("achieved_mbit") is not None:  # a cross-traffic flow's rate (iperf3)
            record["achieved_mbit"] = float(record["achieved_mbit"]) * factor
        return record

    def rejoin(record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        for name in _REJOIN_MOMENTS:
            if record.get(name) is not None:
                record[name] = origin + (float(record[name]) - origin) / factor
        for name in _REJOIN_DURATIONS:
            if record.get(name) is not None:
                record[name] = float(record[name]) / factor
        return record

    peers = [
        PeerRun(
            p.name,
            rows(p.steps),
            rows(p.rounds),
            p.complete,
            {**p.summary, **(p.summary.get("modelled") or {})},
            rows(p.evals),
            [rejoin(r) for r in p.rejoins],
        )
        for p in experiment.peers
    ]
    bandwidth, round_trip = experiment.bandwidth_bytes_per_second, experiment.round_trip_ms
    return dataclasses.replace(
        experiment,
        peers=peers,
        bandwidth_bytes_per_second=None if bandwidth is None else bandwidth * factor,
        round_trip_ms=None if round_trip is None else round_trip / factor,
        faults=[fault(record) for record in experiment.faults],
        time_dilation=factor,
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
