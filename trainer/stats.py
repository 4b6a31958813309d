"""Running statistics of one run and the summary.json document built from them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from experiment.results import (
    COMPLETE_EXIT_REASONS,
    COMPONENTS,
    LOSS_WINDOW,
    RoundRecord,
    StepRecord,
    modelled_times,
    percentile,
)

#: the first steps of a run, left out of the compute it received (the calibration leaves out as many)
RECEIVED_WARMUP_STEPS = 2


@dataclass
class RunStats:
    """Accumulates what summary.json reports: time components, samples, losses, time to target, rounds.

    Losses are smoothed (mean of the last ``LOSS_WINDOW`` steps) so one lucky batch does not count as reaching
    the target: ``final_loss`` is the smoothed loss at the end, ``best_loss`` its minimum over the run.

    :param target_loss: the smoothed training loss whose first crossing is the time to target (None: no
        target)
    """

    target_loss: float | None = None
    steps: int = 0
    samples: int = 0
    final_loss: float | None = None
    best_loss: float | None = None
    hivemind_epoch: int = 0
    time_to_target_loss_seconds: float | None = None
    #: the validation passes' time inside the training loop (the loop sets it at its end)
    validation_seconds: float = 0.0
    #: the steps that measure the compute this process received: after the warm-up, without averaging
    #: (all steps after the warm-up where every step averages): [steps, samples, compute and optimizer
    #: seconds, CPU seconds, a paced run's target seconds, paced seconds]
    _received: list[float] = field(default_factory=lambda: [0, 0, 0.0, 0.0, 0.0, 0.0])
    _received_averaging: list[float] = field(default_factory=lambda: [0, 0, 0.0, 0.0, 0.0, 0.0])
    rounds_ok: int = 0
    rounds_failed: int = 0
    rounds_failed_by_cause: dict[str, int] = field(default_factory=dict)
    final_val_loss: float | None = None
    final_val_accuracy: float | None = None
    components: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in COMPONENTS})
    _recent_losses: deque[float] = field(default_factory=lambda: deque(maxlen=LOSS_WINDOW))

    def add_step(self, record: StepRecord) -> bool:
        """Account one step; returns True when this step first reached the target loss."""
        self.steps += 1
        self.samples += record.samples
        self.hivemind_epoch = record.hivemind_epoch
        for name in COMPONENTS:
            self.components[name].append(getattr(record, name))
        if self.steps > RECEIVED_WARMUP_STEPS and record.cpu_seconds is not None:
            into = self._received_averaging if record.averaging_seconds > 0 else self._received
            # the step's computing: its collectives (averaging) left out where it averaged
            seconds = max(0.0, record.compute_seconds + record.optimizer_seconds - record.averaging_seconds)
            target = record.target_seconds or 0.0
            measured = (1, record.samples, seconds, record.cpu_seconds, target, record.paced_seconds)
            for index, value in enumerate(measured):
                into[index] += value
        if math.isfinite(record.loss):
            self._recent_losses.append(record.loss)
        smoothed = self.smoothed_loss
        self.final_loss = smoothed
        if smoothed is not None and (self.best_loss is None or smoothed < self.best_loss):
            self.best_loss = smoothed
        reached = (
            self.target_loss is not None
            and self.time_to_target_loss_seconds is None
            and smoothed is not None
            and smoothed <= self.target_loss
        )
        if reached and record.wall_seconds is not None:  # on the training clock: validation left out
            self.time_to_target_loss_seconds = record.wall_seconds - record.validation_seconds
        return reached

    @property
    def smoothed_loss(self) -> float | None:
        """Mean training loss of the last ``LOSS_WINDOW`` steps (fewer at the start)."""
        return sum(self._recent_losses) / len(self._recent_losses) if self._recent_losses else None

    def add_round(self, record: RoundRecord) -> None:
        if record.outcome == "ok":
            self.rounds_ok += 1
        else:
            self.rounds_failed += 1
            cause = record.cause or "other"
            self.rounds_failed_by_cause[cause] = self.rounds_failed_by_cause.get(cause, 0) + 1

    def add_eval(self, val_loss: float, val_accuracy: float) -> None:
        self.final_val_loss = val_loss
        self.final_val_accuracy = val_accuracy

    def compute_received(self) -> dict[str, Any] | None:
        """What this process's steps say of the compute it received (controller/received_compute.py judges):
        the samples, the seconds from the batch's arrival to the step's end (compute and optimizer, as the
        calibration's synthetic batches; a step's averaging left out) and the training thread's CPU seconds in
        them, over the steps after
        the warm-up without averaging, or all of them where every step averages (``every_step_averages``);
        a paced run's also the seconds its steps would have taken at the planned CPU speed and quota
        (``target_seconds``) and how long it waited to hold them (``paced_seconds``, inside ``seconds``);
        None before any.

        >>> from experiment.results import StepRecord
        >>> stats = RunStats()
        >>> for step, averaging in enumerate([0.0, 0.0, 0.0, 0.5, 0.0], start=1):
        ...     _ = stats.add_step(StepRecord(step, 0.0, 0.0, 0.2, 0.05, averaging, 0.25, 32, 1.0, 0, 1,
        ...                                   cpu_seconds=0.24))
        >>> stats.compute_received()
        {'steps': 2, 'samples': 64, 'seconds': 0.5, 'cpu_seconds': 0.48, 'every_step_averages': False}
        """
        every = self._received[0] == 0
        steps, samples, seconds, cpu, target, paced = self._received_averaging if every else self._received
        if steps == 0:
            return None
        received = {
            "steps": int(steps),
            "samples": int(samples),
            "seconds": seconds,
            "cpu_seconds": cpu,
            "every_step_averages": every,
        }
        if target > 0:
            received.update(target_seconds=target, paced_seconds=paced)
        return received

    def component_summary(self) -> dict[str, dict[str, float | None]]:
        summary = {}
        for name, values in self.components.items():
            summary[name] = {
                "mean": sum(values) / len(values) if values else None,
                "p50": percentile(values, 0.50),
                "p95": percentile(values, 0.95),
                "total": sum(values),
            }
        return summary

    def summary(
        self,
        *,
        run_id: str,
        peer_id: str,
        strategy: str,
        exit_reason: str,
        start_timestamp: float,
        barrier_release_timestamp: float | None,
        start_wait_seconds: float | None,
        end_timestamp: float,
        loop_end_timestamp: float | None = None,
        extra: dict[str, Any] | None = None,
        time_dilation: float = 1.0,
    ) -> dict[str, Any]:
        """The summary.json document (schema in docs/architecture.md). ``samples_per_second`` is the training
        loop's (barrier release to the loop's end less its validation passes, ``training_seconds``;
        ``validation_seconds`` beside it); ``wall_seconds`` also counts the finish (a collaborative peer may
        wait for the others there, which is not training slower)."""
        released = barrier_release_timestamp
        wall = end_timestamp - released if released is not None else 0.0
        loop_end = loop_end_timestamp if loop_end_timestamp is not None else end_timestamp
        training = loop_end - released - self.validation_seconds if released is not None else 0.0
        document: dict[str, Any] = {
            "run_id": run_id,
            "peer_id": peer_id,
            "strategy": strategy,
            "exit_reason": exit_reason,
            "complete": exit_reason in COMPLETE_EXIT_REASONS,
            "steps": self.steps,
            "samples": self.samples,
            "wall_seconds": wall,
            "training_seconds": training,
            "validation_seconds": self.validation_seconds,
            "samples_per_second": self.samples / training if training > 0 else None,
            "start_timestamp": start_timestamp,
            "barrier_release_timestamp": barrier_release_timestamp,
            "start_wait_seconds": start_wait_seconds,
            "end_timestamp": end_timestamp,
            "final_loss": self.final_loss,
            "best_loss": self.best_loss,
            "target_loss": self.target_loss,
            "time_to_target_loss_seconds": self.time_to_target_loss_seconds,
            "hivemind_epoch": self.hivemind_epoch,
            "rounds_ok": self.rounds_ok,
            "rounds_failed": self.rounds_failed,
            "rounds_failed_by_cause": dict(self.rounds_failed_by_cause),
            "final_val_loss": self.final_val_loss,
            "final_val_accuracy": self.final_val_accuracy,
            "components": self.component_summary(),
            "compute_received": self.compute_received(),
        }
        if extra:
            document.update(extra)
        document["time_dilation"] = time_dilation
        document["modelled"] = modelled_times(document, time_dilation)
        return document
