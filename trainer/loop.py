"""The one training loop every strategy shares: data → forward/backward → strategy step, timed per step."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from experiment.results import EvalRecord, StepRecord
from trainer.memory import rss_bytes
from trainer.stats import RECEIVED_WARMUP_STEPS

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from experiment.results import ResultsWriter
    from trainer.cpu_usage import CgroupMeter
    from trainer.shutdown import StopSignals
    from trainer.stats import RunStats
    from trainer.strategies.base import Strategy
    from trainer.telemetry import Telemetry

log = logging.getLogger(__name__)


class Pace:
    """Holds a calibrated local run's compute to its plan whatever this machine's CPU does meanwhile (a closed
    loop, as DieCast's; docs/time-dilation.md, "Held to the calibration").

    The container got ``1 + headroom`` times the CPU quota its plan needs (``quota`` cores), the plan assuming
    its training thread trains ``rate`` samples per CPU second. A step without averaging (or the part of it
    outside the collectives a strategy runs apart from computing: DDP's and ZeRO's, their seconds and CPU left
    out) in which the container's processes used ``container_cpu`` CPU seconds, ``thread_cpu`` of them the
    training thread's, would have taken ``container_cpu x (samples / rate) / thread_cpu / planned quota`` at
    the planned speed and quota: the container's work scaled to the planned speed, what its other processes (a
    Hivemind peer's DHT, p2pd and averagers) took of it kept as it was. The loop sleeps until the run's paced
    steps (those after the first ``RECEIVED_WARMUP_STEPS``, whose overrun building kernels is not carried)
    have taken the time their targets add up to; a step that ran over is made up by the next ones' shorter
    waits, at most ``MAX_BEHIND`` planned seconds of them (a longer slowdown is not made up, and the run's
    received compute shows it).

    >>> pace = Pace(rate=400.0, headroom=0.15, quota=1.0)  # a plan of 1 / 1.15 = 0.87 of one core
    >>> round(pace.target(samples=32, thread_cpu=0.0696, container_cpu=0.0696), 3)
    0.092
    >>> round(pace.wait(target=0.092, took=0.07), 3), round(pace.wait(target=0.092, took=0.1), 3)
    (0.022, 0.0)
    >>> round(pace.wait(target=0.092, took=0.07), 3)  # the step that ran 8 ms over is made up
    0.014
    """

    #: how far behind its plan (planned seconds) the pacing carries a run, to make it up later
    MAX_BEHIND = 1.0

    def __init__(self, rate: float, headroom: float, quota: float) -> None:
        self.rate, self.headroom, self.quota = rate, headroom, quota
        self.planned_quota = quota / (1 + headroom)
        self.ahead = 0.0  # planned seconds of the paced steps so far less the seconds they took

    def target(self, samples: int, thread_cpu: float, container_cpu: float) -> float | None:
        """The step's seconds at the planned CPU speed and quota (None: its CPU time unknown)."""
        if thread_cpu <= 0 or container_cpu <= 0:
            return None
        return max(container_cpu, thread_cpu) * (samples / self.rate) / thread_cpu / self.planned_quota

    def wait(self, target: float, took: float) -> float:
        """How long to sleep after a step that took ``took`` seconds against its ``target``."""
        self.ahead = max(-self.MAX_BEHIND, self.ahead + target - took)
        if self.ahead <= 0:
            return 0.0
        wait, self.ahead = self.ahead, 0.0
        return wait


@dataclass
class LoopLimits:
    """When the loop stops on its own and when it evaluates.

    :param max_steps: local steps after which the loop ends (exit reason ``max_steps``)
    :param stop_at_target: end when the smoothed training loss reaches the target (exit reason
        ``target_loss``)
    :param eval_every: validate every K steps (0: never)
    :param eval_batches: batches per validation (0: all)
    :param log_every: log a progress line every N steps (0: never)
    """

    max_steps: int
    stop_at_target: bool = True
    eval_every: int = 0
    eval_batches: int = 0
    log_every: int = 50


class TrainingLoop:
    """Trains ``model`` with ``strategy``; measures and reports every step.

    :param model: the module forward runs through (``strategy.training_module()``: the classifier, or the
        strategy's wrapper of it)
    :param strategy: supplies zero_grad/backward/step/stop_reason (see trainer/strategies/base.py)
    :param train_loader: yields (images, labels) batches; restarted at the end of each data epoch
    :param val_loader: validation batches (used when ``limits.eval_every`` > 0)
    :param limits: stop and evaluation settings
    :param stats: accumulates the summary
    :param writer: steps.csv/evals.csv writer (None: no files, e.g. in the overhead benchmark)
    :param telemetry: Prometheus metrics (None: none)
    :param signals: stop requests from SIGTERM/SIGINT (None: not watched)
    :param pace: a calibrated local run's pacing of its steps (None: not paced)
    :param meter: the cgroup's CPU the pacing reads (its container's)
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        strategy: Strategy,
        train_loader: DataLoader,
        val_loader: DataLoader | None,
        limits: LoopLimits,
        stats: RunStats,
        writer: ResultsWriter | None = None,
        telemetry: Telemetry | None = None,
        signals: StopSignals | None = None,
        pace: Pace | None = None,
        meter: CgroupMeter | None = None,
    ) -> None:
        self.model = model
        self.strategy = strategy
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.limits = limits
        self.stats = stats
        self.writer = writer
        self.telemetry = telemetry
        self.signals = signals
        self.pace = pace
        #: the container's CPU, read around each paced step (trainer/cpu_usage.py)
        self.meter = meter if pace is not None else None
        self.loss_fn = nn.CrossEntropyLoss()
        self.step = 0
        self.clock_origin = time.time()
        self._batches: Iterator | None = None
        self.requested_stop: str | None = None
        #: the validation passes' time so far: pauses of training the training clock leaves out
        self.validation_seconds = 0.0

    # ---------------------------------------------------------------- the run

    def run(self, clock_origin: float | None = None) -> str:
        """Step until a stop condition; returns the exit reason."""
        self.clock_origin = time.time() if clock_origin is None else clock_origin
        self.model.train()
        while True:
            if self.signals is not None and self.signals.requested:
                return "signal"
            record = self.timed_step()
            reached_target = self.stats.add_step(record)
            if reached_target:
                log.info("target loss reached at step %d after %.1f s", record.step, record.wall_seconds)
            if self.limits.eval_every and self.step % self.limits.eval_every == 0:
                self.evaluate()
            if self.limits.log_every and self.step % self.limits.log_every == 0:
                log.info(
                    "step %d loss %.4f step %.3fs data %.3fs epoch %d peers %d",
                    self.step, record.loss, record.step_seconds, record.data_seconds,
                    record.hivemind_epoch, record.peers,
                )  # fmt: skip
            reason = self._stop_reason(reached_target)
            if reason is not None:
                return reason

    def _stop_reason(self, reached_target: bool) -> str | None:
        """Signal first; then the loop's own conditions, which a collectively finishing strategy only hears of
        (request_stop, once) and ends when its stop_reason() says so (e.g. at the next epoch boundary)."""
        if self.signals is not None and self.signals.requested:
            return "signal"
        own = None
        if reached_target and self.limits.stop_at_target:
            own = "target_loss"
        elif self.step >= self.limits.max_steps:
            own = "max_steps"
        if own is not None:
            if not getattr(self.strategy, "finishes_collectively", False):
                return own
            if self.requested_stop is None:
                self.requested_stop = own
                log.info("%s reached at step %d: asking the collective to finish", own, self.step)
                self.strategy.request_stop(own)
        return self.strategy.stop_reason()

    # ---------------------------------------------------------------- steps

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._batches is None:
            self._batches = iter(self.train_loader)
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.train_loader)
            return next(self._batches)

    def timed_step(self) -> StepRecord:
        """One measured step: the batch wait, forward+backward, the strategy's step; reported to every
        sink."""
        clock = time.perf_counter
        started = clock()
        images, labels = self.next_batch()
        loaded, cpu_started = clock(), time.thread_time()
        container_started = self.meter.usage_seconds() if self.meter is not None else None
        self.strategy.zero_grad()
        loss = self.loss_fn(self.model(images), labels)
        self.strategy.backward(loss)
        computed = clock()
        outcome = self.strategy.step(len(labels))
        finished, cpu = clock(), time.thread_time() - cpu_started
        # collectives inside forward/backward (FSDP, DeepSpeed) are averaging, not compute
        in_compute = outcome.averaging_in_compute_seconds
        # collectives the strategy ran apart from computing (DDP, ZeRO) are left out of the step's CPU and of
        # the time the pacing holds: the rest is what the calibration's rate is about
        apart = outcome.averaging_thread_cpu_seconds is not None
        if apart:
            cpu = max(0.0, cpu - outcome.averaging_thread_cpu_seconds)
        target, paced = None, 0.0
        settled = self.step >= RECEIVED_WARMUP_STEPS  # the first steps' overrun (kernels built) not carried
        if (
            self.pace is not None
            and settled
            and (outcome.averaging_seconds == 0 or apart)
            and container_started is not None
        ):
            container_cpu = (self.meter.usage_seconds() or container_started) - container_started
            container_cpu -= outcome.averaging_process_cpu_seconds or 0.0
            target = self.pace.target(len(labels), cpu, container_cpu)
            took = finished - loaded - (outcome.averaging_seconds if apart else 0.0)
            wait = self.pace.wait(target, took) if target is not None else 0.0
            if wait > 0:
                time.sleep(wait)
                paced = clock() - finished
                self.pace.ahead -= paced - wait  # a sleep that ran over is made up as well
        self.step += 1
        timestamp = time.time()
        record = StepRecord(
            step=self.step,
            timestamp=timestamp,
            wall_seconds=timestamp - self.clock_origin,
            data_seconds=loaded - started,
            # a paced step's wait is the modelled machine's compute: in compute_seconds, and apart
            compute_seconds=computed - loaded - in_compute + paced,
            optimizer_seconds=finished - computed + in_compute,
            averaging_seconds=outcome.averaging_seconds,
            step_seconds=finished - started + paced,
            samples=len(labels),
            loss=float(loss.detach()),
            hivemind_epoch=outcome.hivemind_epoch,
            peers=outcome.peers,
            rss_bytes=rss_bytes(),
            cpu_seconds=cpu,
            validation_seconds=self.validation_seconds,
            paced_seconds=paced,
            target_seconds=target,
        )
        if self.writer is not None:
            self.writer.write_step(record)
        if self.telemetry is not None:
            self.telemetry.observe_step(record, outcome.collective_samples)
        return record

    def bare_step(self) -> None:
        """The same step with no timers and no reporting (the overhead benchmark's reference)."""
        images, labels = self.next_batch()
        self.strategy.zero_grad()
        self.strategy.backward(self.loss_fn(self.model(images), labels))
        self.strategy.step(len(labels))
        self.step += 1

    # ---------------------------------------------------------------- validation

    def evaluate(self) -> tuple[float, float] | None:
        """Validation loss and accuracy over ``eval_batches`` batches (all when 0); written to evals.csv with
        the pass's duration, which the training clock leaves out (``validation_seconds``)."""
        if self.val_loader is None:
            return None
        started = time.perf_counter()
        self.model.eval()
        total_loss, correct, seen = 0.0, 0, 0
        with torch.no_grad():
            for index, (images, labels) in enumerate(self.val_loader):
                if self.limits.eval_batches and index >= self.limits.eval_batches:
                    break
                logits = self.model(images)
                total_loss += float(self.loss_fn(logits, labels)) * len(labels)
                correct += int((logits.argmax(dim=1) == labels).sum())
                seen += len(labels)
        self.model.train()
        if seen == 0:
            return None
        val_loss, val_accuracy = total_loss / seen, correct / seen
        self.stats.add_eval(val_loss, val_accuracy)
        timestamp = time.time()
        took = time.perf_counter() - started
        self.validation_seconds += took
        if self.writer is not None:
            self.writer.write_eval(
                EvalRecord(
                    step=self.step,
                    timestamp=timestamp,
                    wall_seconds=timestamp - self.clock_origin,
                    val_loss=val_loss,
                    val_accuracy=val_accuracy,
                    eval_seconds=took,
                )
            )
        log.info("step %d validation loss %.4f accuracy %.3f", self.step, val_loss, val_accuracy)
        return val_loss, val_accuracy


def evaluate_at_end(loop: TrainingLoop, exit_reason: str, eval_every: int) -> None:
    """A last validation when the run ended between evaluation steps (not after a signal: leave quickly)."""
    if eval_every and exit_reason != "signal" and loop.step % eval_every != 0 and loop.step > 0:
        loop.evaluate()
