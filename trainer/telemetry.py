"""Prometheus metrics of one trainer process (names, types, labels and buckets are defined here only).

Every series carries ``run_id``, ``peer`` and ``strategy``; the averaging-round series add ``kind`` and
``outcome``, the failed rounds' counter ``kind`` and ``cause`` (round health, live). Each process
has its own :class:`~prometheus_client.CollectorRegistry` (no default process/platform collectors: the host's
node_exporter covers those), and every labelled series exists at 0 from start-up so rate() and absent()
behave from the first scrape (the received share at NaN until a round has one: no round yet is not
"received nothing").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from experiment.results import ROUND_CAUSES, ROUND_KINDS, ROUND_OUTCOMES, RoundRecord, StepRecord
from experiment.variables import SETTING_VARIABLES
from trainer.config import RunConfig
from trainer.memory import MEMORY_KINDS

log = logging.getLogger(__name__)

BASE_LABELS = ("run_id", "peer", "strategy")
#: trainer_averaging_bytes_total's ``direction``
TRAFFIC_DIRECTIONS = ("sent", "received")
_RUN_CONFIG_FIELDS = {field.name for field in dataclasses.fields(RunConfig)}
ROUND_LABELS = ("kind", "outcome")
# Seconds, 1 ms … 300 s: data loading and small-model steps sit in milliseconds, ResNet18 steps in tenths of a
# second, averaging rounds in seconds, stalled rounds (timeouts) in minutes.
BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    60.0,
    120.0,
    300.0,
)

# Exposed family name → metric type. Dashboards, recording rules and tests import this.
METRICS: dict[str, str] = {
    "trainer_step_seconds": "histogram",
    "trainer_data_loading_seconds": "histogram",
    "trainer_compute_seconds": "histogram",
    "trainer_optimizer_seconds": "histogram",
    "trainer_step_averaging_seconds": "histogram",
    "trainer_averaging_seconds": "histogram",
    "trainer_steps_total": "counter",
    "trainer_samples_total": "counter",
    "trainer_averaging_rounds_total": "counter",
    "trainer_averaging_failures_total": "counter",
    "trainer_matchmaking_seconds": "histogram",
    "trainer_averaging_received_share": "gauge",
    "trainer_averaging_bytes_total": "counter",
    "trainer_loss": "gauge",
    "trainer_hivemind_epoch": "gauge",
    "trainer_peers": "gauge",
    "trainer_collective_samples": "gauge",
    "trainer_target_batch_size": "gauge",
    "trainer_time_dilation": "gauge",
    "trainer_start_timestamp_seconds": "gauge",
    "trainer_memory_bytes": "gauge",
    "trainer_run_info": "gauge",
}
# Extra labels beyond BASE_LABELS, per family.
EXTRA_LABELS: dict[str, tuple[str, ...]] = {
    "trainer_averaging_seconds": ROUND_LABELS,
    "trainer_averaging_rounds_total": ROUND_LABELS,
    "trainer_averaging_failures_total": ("kind", "cause"),
    "trainer_matchmaking_seconds": ("kind",),
    "trainer_averaging_received_share": ("kind",),
    "trainer_averaging_bytes_total": ("direction",),
    "trainer_memory_bytes": ("kind",),
    # the variables that define the run's setting and that the trainer knows (experiment/variables.py), the
    # peers among them: runs with equal labels are repeats of one setting, as in the report
    "trainer_run_info": tuple(
        name for name in SETTING_VARIABLES if name in _RUN_CONFIG_FIELDS and name not in BASE_LABELS
    ),
}

_HELP = {
    "trainer_step_seconds": "Duration of a local training step (data + compute + optimizer)",
    "trainer_data_loading_seconds": "Time a step was blocked waiting for its batch",
    "trainer_compute_seconds": "Forward and backward time of a step",
    "trainer_optimizer_seconds": "Optimizer step time, including time blocked on averaging",
    "trainer_step_averaging_seconds": "Part of a step's optimizer time blocked in matchmaking, all-reduce or "
    "state averaging (0 for the baseline)",
    "trainer_averaging_seconds": "Duration of an averaging round: all-reduce time, or blocking time when the "
    "all-reduce was not measured",
    "trainer_steps_total": "Local training steps taken",
    "trainer_samples_total": "Training samples processed locally",
    "trainer_averaging_rounds_total": "Averaging rounds by kind and outcome",
    "trainer_averaging_failures_total": "Averaging rounds that failed or timed out, by kind and cause "
    "(experiment.results.ROUND_CAUSES: no_group, allreduce_timeout, peer_left, partial, behind, ...)",
    "trainer_matchmaking_seconds": "Time a round spent forming its group (all of a round that found none)",
    "trainer_averaging_received_share": "Share (0-1) of the averaged results this peer received in its last "
    "all-reduce of this kind (1: all of it; below 1: Hivemind ended the round with parts missing)",
    "trainer_averaging_bytes_total": "Bytes this host's Hivemind traffic sent or received (direction) during "
    "this peer's all-reduces, counted apart from other traffic by the firewall's chains (trainer/traffic.py; "
    "stays 0 where they are not there)",
    "trainer_loss": "Training loss of the latest step",
    "trainer_hivemind_epoch": "Collective Hivemind epoch (0 for the baseline)",
    "trainer_peers": "Live peers known to this peer, itself included (1 for the baseline)",
    "trainer_collective_samples": "Samples accumulated by all peers towards the target batch size",
    "trainer_target_batch_size": "Samples per Hivemind epoch (0 for the baseline)",
    "trainer_time_dilation": "D: times slower this peer runs than the machine it models (1: undilated); "
    "its times / D are the modelled machine's",
    "trainer_start_timestamp_seconds": "Unix time the start barrier released this peer (0 before)",
    "trainer_memory_bytes": "Memory of the trainer process by kind: rss (resident set, per step), "
    "parameters, gradients, optimizer_state (this process's share)",
    "trainer_run_info": "Settings of this run as labels (value 1)",
}


def _family_kind(name: str) -> type:
    return {"histogram": Histogram, "counter": Counter, "gauge": Gauge}[METRICS[name]]


class Telemetry:
    """The metrics of one trainer process and their HTTP exporter.

    :param run_id: value of the ``run_id`` label
    :param peer: value of the ``peer`` label
    :param strategy: value of the ``strategy`` label
    :param registry: registry to use (default: a new one for this object)

    >>> telemetry = Telemetry(run_id="r1", peer="peer-01", strategy="baseline")
    >>> telemetry.registry.get_sample_value("trainer_steps_total", telemetry.base_labels)
    0.0
    """

    def __init__(
        self, *, run_id: str, peer: str, strategy: str, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.base_labels = {"run_id": run_id, "peer": peer, "strategy": strategy}
        self.port: int | None = None
        self._server: Any = None
        self._families: dict[str, Any] = {}
        for name in METRICS:
            self._families[name] = self._create(name)
        bound = {
            name: family.labels(**self.base_labels)
            for name, family in self._families.items()
            if name not in EXTRA_LABELS
        }
        self._step = bound["trainer_step_seconds"]
        self._data = bound["trainer_data_loading_seconds"]
        self._compute = bound["trainer_compute_seconds"]
        self._optimizer = bound["trainer_optimizer_seconds"]
        self._step_averaging = bound["trainer_step_averaging_seconds"]
        self._steps = bound["trainer_steps_total"]
        self._samples = bound["trainer_samples_total"]
        self._loss = bound["trainer_loss"]
        self._epoch = bound["trainer_hivemind_epoch"]
        self._peers = bound["trainer_peers"]
        self._collective = bound["trainer_collective_samples"]
        self._tbs = bound["trainer_target_batch_size"]
        self._dilation = bound["trainer_time_dilation"]
        self._start = bound["trainer_start_timestamp_seconds"]
        self._round_seconds = {}
        self._round_count = {}
        self._failures = {
            (kind, cause): self._families["trainer_averaging_failures_total"].labels(
                **self.base_labels, kind=kind, cause=cause
            )
            for kind in ROUND_KINDS
            for cause in ROUND_CAUSES
        }
        self._matchmaking = {
            kind: self._families["trainer_matchmaking_seconds"].labels(**self.base_labels, kind=kind)
            for kind in ROUND_KINDS
        }
        self._received = {
            kind: self._families["trainer_averaging_received_share"].labels(**self.base_labels, kind=kind)
            for kind in ROUND_KINDS
        }
        for gauge in self._received.values():
            gauge.set(float("nan"))  # no all-reduce yet: a gap on the dashboard, not "received nothing"
        for kind in ROUND_KINDS:
            for outcome in ROUND_OUTCOMES:
                key = (kind, outcome)
                self._round_seconds[key] = self._families["trainer_averaging_seconds"].labels(
                    **self.base_labels, kind=kind, outcome=outcome
                )
                self._round_count[key] = self._families["trainer_averaging_rounds_total"].labels(
                    **self.base_labels, kind=kind, outcome=outcome
                )
        self._memory = {
            kind: self._families["trainer_memory_bytes"].labels(**self.base_labels, kind=kind)
            for kind in MEMORY_KINDS
        }
        self._bytes = {
            direction: self._families["trainer_averaging_bytes_total"].labels(
                **self.base_labels, direction=direction
            )
            for direction in TRAFFIC_DIRECTIONS
        }
        self._peers.set(1)

    def _create(self, name: str) -> Any:
        kind = _family_kind(name)
        labels = BASE_LABELS + EXTRA_LABELS.get(name, ())
        exposed = name[: -len("_total")] if kind is Counter else name
        extra = {"buckets": BUCKETS} if kind is Histogram else {}
        return kind(exposed, _HELP[name], labelnames=labels, registry=self.registry, **extra)

    # ---------------------------------------------------------------- exporter

    def start_exporter(self, port: int, address: str = "0.0.0.0") -> int:
        """Serve /metrics on ``port`` (0: a free port); returns the bound port."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        self._server = server
        self.port = int(server.server_port)
        log.info("metrics at http://%s:%d/metrics", address, self.port)
        return self.port

    def stop_exporter(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ---------------------------------------------------------------- updates

    def set_run_info(self, config: RunConfig) -> None:
        info = {label: _label_value(getattr(config, label)) for label in EXTRA_LABELS["trainer_run_info"]}
        self._families["trainer_run_info"].labels(**self.base_labels, **info).set(1)
        self._tbs.set(config.target_batch_size if config.strategy == "hivemind" else 0)
        self._dilation.set(config.time_dilation)

    def set_start_timestamp(self, timestamp: float | None = None) -> None:
        self._start.set(time.time() if timestamp is None else timestamp)

    def observe_step(self, record: StepRecord, collective_samples: int | None = None) -> None:
        self._step.observe(record.step_seconds)
        self._data.observe(record.data_seconds)
        self._compute.observe(record.compute_seconds)
        self._optimizer.observe(record.optimizer_seconds)
        self._step_averaging.observe(record.averaging_seconds)
        self._steps.inc()
        self._samples.inc(record.samples)
        self._loss.set(record.loss)
        self._epoch.set(record.hivemind_epoch)
        self._peers.set(record.peers)
        if collective_samples is not None:
            self._collective.set(collective_samples)
        if record.rss_bytes is not None:
            self._memory["rss"].set(record.rss_bytes)

    def observe_memory(self, sizes: dict[str, int | None]) -> None:
        """Set the memory gauge for the kinds given (trainer.memory.MEMORY_KINDS; None values are skipped)."""
        for kind, size in sizes.items():
            if size is not None:
                self._memory[kind].set(size)

    def observe_round(self, record: RoundRecord) -> None:
        key = (record.kind, record.outcome)
        if key not in self._round_count:
            log.warning("round with unknown kind/outcome %s not exported", key)
            return
        self._round_count[key].inc()
        seconds = (
            record.allreduce_seconds if record.allreduce_seconds is not None else record.blocking_seconds
        )
        if seconds is not None:
            self._round_seconds[key].observe(seconds)
        if record.outcome != "ok":
            self._failures[(record.kind, record.cause if record.cause in ROUND_CAUSES else "other")].inc()
        if record.matchmaking_seconds is not None:
            self._matchmaking[record.kind].observe(record.matchmaking_seconds)
        if record.received_share is not None:
            self._received[record.kind].set(record.received_share)
        counts = (record.sent_bytes, record.received_bytes)
        for direction, count in zip(TRAFFIC_DIRECTIONS, counts, strict=True):
            if count:
                self._bytes[direction].inc(count)


def _label_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
