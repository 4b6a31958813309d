"""The results files of one peer's run, written as the run goes (the schema is in docs/architecture.md).

Readers (the experiment playbook, ``trainer grid``, ``trainer report``, dashboards tests) import the column
tuples and the ``read_*`` helpers from here instead of restating the schema.

Crash safety: rows are flushed to the OS every ``flush_every`` steps (and every round/eval row at once), so a
SIGKILL loses at most that many steps; a row cut in half by a kill is dropped by the readers.
``summary.json`` and ``config.json`` are replaced atomically (write to a temporary file, then rename).
"""

from __future__ import annotations

import csv
import json
import math
import os
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

STEP_COLUMNS = (
    "step",
    "timestamp",
    "wall_seconds",
    "data_seconds",
    "compute_seconds",
    "optimizer_seconds",
    "averaging_seconds",
    "step_seconds",
    "samples",
    "loss",
    "hivemind_epoch",
    "peers",
    "rss_bytes",
    "cpu_seconds",
    "validation_seconds",
    "paced_seconds",
    "target_seconds",
)
ROUND_COLUMNS = (
    "round",
    "timestamp",
    "wall_seconds",
    "epoch",
    "kind",
    "outcome",
    "group_size",
    "matchmaking_seconds",
    "allreduce_seconds",
    "blocking_seconds",
    "error",
    "cause",
    "received_share",
    "sent_bytes",
    "received_bytes",
    "sent_mbit_per_second",
)
#: why a round failed (rounds.csv ``cause``; empty for ok rounds), from what the round's averager saw:
#: no_group (matchmaking ended without a group: the all-reduce never began), allreduce_timeout (the group's
#: all-reduce ran out of time), peer_left (the all-reduce began and failed: a member went away or refused
#: its part), partial (Hivemind ended the all-reduce with some parts of the result missing and called it
#: done; the peer kept its own values for them: error "partial: ..."), behind (the peer found the
#: collaboration an epoch ahead, discarded its accumulated samples and loaded the state from the others),
#: state_download (it was behind and loading the state failed: it is still behind), other (anything else;
#: the ``error`` column has the exception text). docs/hivemind-behaviour.md.
ROUND_CAUSES = ("no_group", "allreduce_timeout", "peer_left", "partial", "behind", "state_download", "other")
#: the start of a ``partial`` round's error text
PARTIAL_ERROR = "partial:"


def failure_cause(outcome: str, allreduce_seconds: float | None, error: str | None) -> str:
    """The ``cause`` of a round that was not ok (see ROUND_CAUSES).

    >>> failure_cause("timeout", None, "TimeoutError: ")
    'no_group'
    >>> failure_cause("timeout", 2.5, "TimeoutError: ")
    'allreduce_timeout'
    >>> failure_cause("failed", 0.3, "AllreduceException: peer disconnected")
    'peer_left'
    >>> failure_cause("failed", 0.04, "partial: received 81.9% of the averaged results")
    'partial'
    >>> failure_cause("failed", None, "ValueError: bad tensor")
    'other'
    """
    if outcome == "ok":
        return ""
    if (error or "").startswith(PARTIAL_ERROR):
        return "partial"
    began = allreduce_seconds is not None
    text = (error or "").lower()
    if not began and (outcome == "timeout" or "group" in text or "matchmaking" in text):
        return "no_group"
    if began and outcome == "timeout":
        return "allreduce_timeout"
    if began:
        return "peer_left"
    return "other"


EVAL_COLUMNS = ("step", "timestamp", "wall_seconds", "val_loss", "val_accuracy", "eval_seconds")
COMPONENTS = ("step_seconds", "data_seconds", "compute_seconds", "optimizer_seconds", "averaging_seconds")
ROUND_KINDS = ("gradients", "parameters")
ROUND_OUTCOMES = ("ok", "failed", "timeout")
EXIT_REASONS = ("max_steps", "target_loss", "collective_finish", "signal", "start_timeout", "error")
COMPLETE_EXIT_REASONS = ("max_steps", "target_loss", "collective_finish")

# How summary.json's statistics are computed (trainer/stats.py); the report computes its own the same way.
#: steps in the smoothed training loss (summary.json's final_loss, best_loss, time to target)
LOSS_WINDOW = 10


def percentile(values: list[float], fraction: float) -> float | None:
    """Linear-interpolated percentile (``fraction`` in 0..1) of ``values``; None when empty.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5)
    2.5
    """
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# Two clocks (time dilation, trainer/dilation.py): a peer D times slower than the machine it models measures
# D times longer durations; summary.json gives them as measured and, under ``modelled``, divided by D.
#: summary.json's durations and rates that the modelled clock scales (components' statistics too)
MODELLED_DURATIONS = (
    *("wall_seconds", "training_seconds", "validation_seconds", "start_wait_seconds"),
    "time_to_target_loss_seconds",
)
MODELLED_RATES = ("samples_per_second",)

#: the "kind" of a compute calibration (`trainer calibrate` writes it, controller/calibration.py reads it)
CALIBRATION_KIND = "testbed-thread-scaling"


def modelled_times(summary: dict[str, Any], factor: float) -> dict[str, Any]:
    """summary.json's ``modelled``: its durations / ``factor``, its rates x ``factor``, each component's.

    >>> view = modelled_times({"wall_seconds": 80.0, "samples_per_second": 4.0,
    ...                        "components": {"step_seconds": {"mean": 2.0, "total": 80.0}}}, 8.0)
    >>> view["wall_seconds"], view["samples_per_second"], view["components"]["step_seconds"]
    (10.0, 32.0, {'mean': 0.25, 'total': 10.0})
    """
    view: dict[str, Any] = {}
    for name in (*MODELLED_DURATIONS, *MODELLED_RATES):
        if name in summary:
            value = summary[name]
            if value is not None:
                value = value * factor if name in MODELLED_RATES else value / factor
            view[name] = value
    components = summary.get("components")
    if isinstance(components, dict):
        view["components"] = {
            name: {key: None if value is None else value / factor for key, value in statistics.items()}
            for name, statistics in components.items()
        }
    return view


CONFIG_FILE = "config.json"
STEPS_FILE = "steps.csv"
ROUNDS_FILE = "rounds.csv"
EVALS_FILE = "evals.csv"
SUMMARY_FILE = "summary.json"
MULTIADDRS_FILE = "multiaddrs.txt"
STARTED_FILE = "started.json"  # written when the start barrier releases: what a fault agent times faults from
#: written by the fault agent before it starts a killed trainer again (restart fault, churn): the trainer that
#: finds it rejoins the running collaboration and appends to the results (read and removed at its start)
REJOIN_FILE = "rejoin.json"
#: one line per rejoin of this peer: the rejoin document and what the rejoin cost (the state download)
REJOINS_FILE = "rejoins.jsonl"
RESULT_FILES = (
    CONFIG_FILE, STEPS_FILE, ROUNDS_FILE, EVALS_FILE, SUMMARY_FILE, MULTIADDRS_FILE, STARTED_FILE,
    REJOINS_FILE,
)  # fmt: skip

_INT_COLUMNS = {
    *("step", "samples", "hivemind_epoch", "peers", "round", "epoch", "group_size", "rss_bytes"),
    *("sent_bytes", "received_bytes"),
}
_TEXT_COLUMNS = {"kind", "outcome", "error", "cause"}


@dataclass
class StepRecord:
    """One local training step (a steps.csv row). Times in seconds; ``timestamp`` is Unix time at the step's
    end.

    ``wall_seconds`` counts from the start barrier's release (the writer fills it in when left None).
    """

    step: int
    timestamp: float
    data_seconds: float
    compute_seconds: float
    optimizer_seconds: float
    averaging_seconds: float
    step_seconds: float
    samples: int
    loss: float
    hivemind_epoch: int
    peers: int
    wall_seconds: float | None = None
    rss_bytes: int | None = None  # the process's resident set after the step (trainer/memory.py)
    #: the training thread's CPU time from the batch's arrival to the step's end (the main thread's: the one
    #: thread of a local container; with more torch threads the others' are not in it)
    cpu_seconds: float | None = None
    #: the validation passes' time before this step's end, in all: the training clock is wall_seconds less it
    validation_seconds: float = 0.0
    #: a paced step's wait (trainer/loop.py, Pace), inside compute_seconds and step_seconds
    paced_seconds: float = 0.0
    #: a paced run's step: what its compute and optimizer would have taken at the planned CPU speed and quota
    #: (None: a step with averaging, or a run not paced)
    target_seconds: float | None = None


@dataclass
class RoundRecord:
    """One averaging round as a strategy measured it (a rounds.csv row; the writer numbers it and adds wall
    time).

    :param timestamp: Unix time (s) when the round ended
    :param epoch: the Hivemind epoch the round belongs to
    :param kind: ``gradients`` or ``parameters``
    :param outcome: ``ok``, ``failed`` or ``timeout``
    :param group_size: peers in the averaging group (None when no group formed or unknown)
    :param matchmaking_seconds: time spent forming the group (None when not separable)
    :param allreduce_seconds: time of the all-reduce itself (None when not measured)
    :param blocking_seconds: time the training step was blocked by this round (None when not measured)
    :param error: a short error text for failed rounds (None when ok)
    :param cause: why it failed, one of ROUND_CAUSES ("" when ok); derived when not given
    :param received_share: share (0-1) of the averaged results this peer received in the all-reduce (None
        when no all-reduce ran or it was not measured)
    :param sent_bytes: bytes this host's Hivemind traffic sent during the all-reduce, counted apart from
        other traffic by the firewall's chains (trainer/traffic.py; None where not counted). Rounds that
        overlap in time (gradients and a background state round) each count the bytes of both.
    :param received_bytes: the same, received
    :param sent_mbit_per_second: ``sent_bytes`` over the all-reduce's seconds, as measured (the report gives
        it in modelled time)
    """

    timestamp: float
    epoch: int
    kind: str
    outcome: str
    group_size: int | None = None
    matchmaking_seconds: float | None = None
    allreduce_seconds: float | None = None
    blocking_seconds: float | None = None
    error: str | None = None
    cause: str | None = None
    received_share: float | None = None
    sent_bytes: int | None = None
    received_bytes: int | None = None
    sent_mbit_per_second: float | None = None

    def __post_init__(self) -> None:
        if self.cause is None:
            self.cause = failure_cause(self.outcome, self.allreduce_seconds, self.error)


@dataclass
class EvalRecord:
    """One validation pass (an evals.csv row)."""

    step: int
    timestamp: float
    val_loss: float
    val_accuracy: float
    wall_seconds: float | None = None
    #: how long the pass took: a pause of training that the training clock leaves out
    eval_seconds: float | None = None


class ResultsWriter:
    """Writes one peer's results directory as the run goes.

    :param run_dir: the results directory (created if missing)
    :param flush_every: steps between flushes of steps.csv to the OS (a SIGKILL loses at most this many steps)
    :param write_evals: create evals.csv (when evaluation is enabled)

    >>> import tempfile
    >>> writer = ResultsWriter(tempfile.mkdtemp(), flush_every=5)
    >>> writer.start_clock(1_700_000_000.0)
    >>> writer.close()
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        flush_every: int = 5,
        write_evals: bool = False,
        append: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.flush_every = max(1, flush_every)
        self._lock = threading.Lock()
        self._clock_origin: float | None = None
        #: append to an earlier incarnation's files (a rejoining peer): rounds go on numbering from its last
        self.append = append
        self._round_number = len(read_rounds(self.run_dir)) if append else 0
        self._unflushed_steps = 0
        self._steps = self._open_csv(STEPS_FILE, STEP_COLUMNS)
        self._rounds = self._open_csv(ROUNDS_FILE, ROUND_COLUMNS)
        self._evals = self._open_csv(EVALS_FILE, EVAL_COLUMNS) if write_evals else None

    def _open_csv(self, name: str, columns: tuple[str, ...]) -> tuple[TextIO, Any]:
        path = self.run_dir / name
        header = not (self.append and path.exists() and path.stat().st_size > 0)
        handle = open(path, "w" if header else "a", newline="", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        writer = csv.writer(handle)
        if header:
            writer.writerow(columns)
        handle.flush()
        return handle, writer

    # ---------------------------------------------------------------- clock

    def start_clock(self, origin_timestamp: float) -> None:
        """Set the Unix time ``wall_seconds`` counts from (the start barrier's release) and write it to
        started.json at once: a fault agent times its faults from it, before any step is written. A rejoining
        peer keeps the run's first release (its rows go on on the same clock)."""
        if self.append:
            earlier = _read_json(self.run_dir / STARTED_FILE)
            if earlier and earlier.get("barrier_released_at") is not None:
                self._clock_origin = float(earlier["barrier_released_at"])
                return
        self._clock_origin = origin_timestamp
        write_json_atomic(self.run_dir / STARTED_FILE, {"barrier_released_at": origin_timestamp})

    @property
    def clock_origin(self) -> float | None:
        """The Unix time rows count from (a rejoining peer's: the run's first release)."""
        return self._clock_origin

    def wall_seconds(self, timestamp: float) -> float | None:
        return None if self._clock_origin is None else timestamp - self._clock_origin

    # ---------------------------------------------------------------- rows

    def write_step(self, record: StepRecord) -> None:
        if record.wall_seconds is None:
            record.wall_seconds = self.wall_seconds(record.timestamp)
        handle, writer = self._steps
        row = asdict(record)
        with self._lock:
            writer.writerow([_cell(row[c]) for c in STEP_COLUMNS])
            self._unflushed_steps += 1
            if self._unflushed_steps >= self.flush_every:
                handle.flush()
                self._unflushed_steps = 0

    def write_round(self, record: RoundRecord) -> int:
        """Append a round (thread-safe: strategies report from their own threads); returns its number."""
        with self._lock:
            self._round_number += 1
            row = asdict(record)
            row["round"] = self._round_number
            row["wall_seconds"] = self.wall_seconds(record.timestamp)
            handle, writer = self._rounds
            writer.writerow([_cell(row[c]) for c in ROUND_COLUMNS])
            handle.flush()
            return self._round_number

    def write_eval(self, record: EvalRecord) -> None:
        if self._evals is None:
            raise RuntimeError("ResultsWriter was created with write_evals=False")
        if record.wall_seconds is None:
            record.wall_seconds = self.wall_seconds(record.timestamp)
        handle, writer = self._evals
        row = asdict(record)
        with self._lock:
            writer.writerow([_cell(row[c]) for c in EVAL_COLUMNS])
            handle.flush()

    def flush(self) -> None:
        with self._lock:
            for pair in (self._steps, self._rounds, self._evals):
                if pair is not None and not pair[0].closed:
                    pair[0].flush()
            self._unflushed_steps = 0

    # ---------------------------------------------------------------- whole-file documents

    def write_config(self, document: dict[str, Any]) -> None:
        write_json_atomic(self.run_dir / CONFIG_FILE, document)

    def write_summary(self, document: dict[str, Any]) -> None:
        self.flush()
        write_json_atomic(self.run_dir / SUMMARY_FILE, document)

    def close(self) -> None:
        with self._lock:
            for pair in (self._steps, self._rounds, self._evals):
                if pair is not None and not pair[0].closed:
                    pair[0].flush()
                    os.fsync(pair[0].fileno())
                    pair[0].close()


# -------------------------------------------------------------------- directory helpers


def prepare_run_dir(run_dir: str | os.PathLike[str], *, overwrite: bool) -> Path:
    """Create ``run_dir``; refuse one holding a finished run unless ``overwrite`` (then clear its result
    files).

    Raises FileExistsError naming the directory.
    """
    path = Path(run_dir)
    if is_complete(path) and not overwrite:
        raise FileExistsError(
            f"results dir already holds a finished run, pass --overwrite to replace it: {path}"
        )
    path.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:
        (path / name).unlink(missing_ok=True)
    return path


def take_rejoin(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The fault agent's rejoin.json (incarnation, killed_at, restarted_at) when this start is a restart of a
    killed trainer, removed so that no later start mistakes it for its own; None for a first start.

    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp())
    >>> write_json_atomic(run_dir / REJOIN_FILE, {"incarnation": 2})
    >>> take_rejoin(run_dir), take_rejoin(run_dir)
    ({'incarnation': 2}, None)
    """
    path = Path(run_dir) / REJOIN_FILE
    document = _read_json(path)
    path.unlink(missing_ok=True)
    return document


def append_rejoin(run_dir: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Add one rejoin's record to rejoins.jsonl (kept across incarnations, unlike summary.json)."""
    with open(Path(run_dir) / REJOINS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=_json_default) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_rejoins(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """rejoins.jsonl's records, in order (a torn last line, from a kill while writing, is left out).

    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp())
    >>> append_rejoin(run_dir, {"incarnation": 2, "state_download_seconds": 0.5})
    >>> read_rejoins(run_dir)
    [{'incarnation': 2, 'state_download_seconds': 0.5}]
    """
    try:
        lines = (Path(run_dir) / REJOINS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def last_step(run_dir: str | os.PathLike[str]) -> int:
    """The last step an earlier incarnation wrote to steps.csv (0: none)."""
    steps = read_steps(run_dir)
    return max((int(row["step"]) for row in steps if row.get("step") is not None), default=0)


def write_json_atomic(path: str | os.PathLike[str], document: dict[str, Any]) -> None:
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, sort_keys=False, default=_json_default)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)


def write_multiaddrs(run_dir: str | os.PathLike[str], addresses: list[str]) -> Path:
    """Write the bootstrap peer's visible multiaddrs, one per line, atomically (others poll for this file)."""
    target = Path(run_dir) / MULTIADDRS_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text("".join(f"{address}\n" for address in addresses), encoding="utf-8")
    os.replace(temporary, target)
    return target


# -------------------------------------------------------------------- readers


def read_steps(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """steps.csv as typed dicts (a trailing row cut short by a crash is dropped)."""
    return _read_csv(Path(run_dir) / STEPS_FILE, STEP_COLUMNS)


def read_rounds(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return _read_csv(Path(run_dir) / ROUNDS_FILE, ROUND_COLUMNS)


def read_evals(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return _read_csv(Path(run_dir) / EVALS_FILE, EVAL_COLUMNS)


def read_summary(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """summary.json, or None when the run has not written one (still running, or killed)."""
    return _read_json(Path(run_dir) / SUMMARY_FILE)


def read_config(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    return _read_json(Path(run_dir) / CONFIG_FILE)


def is_complete(run_dir: str | os.PathLike[str]) -> bool:
    """True when ``run_dir`` holds a finished run (summary.json with ``complete: true``)."""
    summary = read_summary(run_dir)
    return bool(summary and summary.get("complete") is True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return document if isinstance(document, dict) else None


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    if not text:
        return []
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # the last row was cut short
    rows: list[dict[str, Any]] = []
    reader = csv.reader(line for line in lines if line)
    header = next(reader, None)
    if header is None:
        return []
    # columns are only ever added at the end: files written before an addition read with None for it
    if tuple(header) != columns[: len(header)] or not header:
        raise ValueError(f"{path}: unexpected columns {header}, expected {list(columns)}")
    missing = dict.fromkeys(columns[len(header) :])
    for cells in reader:
        if len(cells) != len(header):
            continue
        row = {name: _parse(name, cell) for name, cell in zip(header, cells, strict=True)}
        rows.append({**row, **missing})
    return rows


def _parse(name: str, cell: str) -> Any:
    if cell == "":
        return None
    if name in _TEXT_COLUMNS:
        return cell
    if name in _INT_COLUMNS:
        return int(float(cell))
    return float(cell)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(round(value, 9)) if abs(value) < 1e6 else repr(value)
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
