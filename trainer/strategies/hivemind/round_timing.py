"""Per-round timing of Hivemind averaging (gradients and parameters), built on hivemind 1.1.12 internals.

Hivemind has no public metric for its averaging rounds, so this module instruments three places:

- in each averager's child process (gradient averager and state averager), ``_step`` (one whole round:
  matchmaking, then all-reduce, with retries) and ``_aggregate_with_group`` (the all-reduce itself, after a
  group formed). The child sends one :class:`ChildRound` per round through a multiprocessing queue created
  before hivemind forks the averagers (``RoundCollector`` installs it as a class attribute the forked
  children inherit);
- in the training process, the calls where ``hivemind.Optimizer.step`` waits for a round:
  ``_average_gradients_and_load_into_optimizer`` (a gradient round), the wait for a background parameter
  round inside ``TrainingStateAverager.step``, ``_update_global_epoch`` (the whole epoch transition) and
  ``load_state_from_peers`` (and ``_should_load_state_from_peers``, to tell when ``step`` found the peer
  behind: the epoch it lost is written as a failed row with cause ``behind`` or ``state_download``);
- the state averager's ``_do`` (its background parameter round), to learn which round it runs.

Rounds are matched by the id of their ``StepControl`` (an ``MPFuture`` keeps ``_uid`` across processes).

Definitions (rounds.csv): ``matchmaking_seconds`` runs from the moment the round was handed to the averager
to the start of its (last) all-reduce attempt; for pre-scheduled rounds this begins before the epoch boundary
and overlaps with compute. ``allreduce_seconds`` is the last all-reduce attempt. ``blocking_seconds`` is the
time the training step waited for the round (0.0 when it never waited, e.g. a background parameter round that
finished in time). A round the optimizer cancelled while still looking for a group (nobody averaged, nobody
waited) is counted in ``rounds_cancelled`` and not written as a row.

:func:`trainer.strategies.hivemind.internals.check_internals` fails loudly when any of these internals
differ from the pinned version.
"""

from __future__ import annotations

import contextvars
import logging
import math
import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from experiment.results import PARTIAL_ERROR

log = logging.getLogger(__name__)

KIND_GRADIENTS = "gradients"
KIND_PARAMETERS = "parameters"


# ------------------------------------------------------------------------------------------ averager children


@dataclass
class ChildRound:
    """One averaging round as the averager child process saw it (sent to the training process)."""

    uid: int
    kind: str
    started: float  # Unix time the averager began the round
    ended: float  # Unix time the round finished (ok, failed or cancelled)
    outcome: str  # ok | failed | timeout | cancelled
    group_size: int | None = None
    allreduce_started: float | None = None
    allreduce_seconds: float | None = None
    attempts: int = 0
    error: str | None = None
    received: float | None = None  # share of the averaged results received (None: no all-reduce ran)
    # this host's Hivemind bytes during the all-reduce (trainer/traffic.py; None: not counted here)
    sent_bytes: int | None = None
    received_bytes: int | None = None


_CURRENT_ROUND: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "hm_round", default=None
)


class RoundTimingMixin:
    """Mixed into an averager class: times each round in the averager's process, reports a ChildRound."""

    round_kind = ""
    #: set by RoundCollector before hivemind forks the averager; the child inherits it
    round_queue: Any = None
    #: the host's traffic counter (trainer/traffic.py), read as an all-reduce starts and ends; None: not read
    traffic_counter: Any = None

    async def _step(self, *, step, future_for_init):
        current: dict[str, Any] = {"started": time.time(), "attempts": 0}
        _CURRENT_ROUND.set(current)
        try:
            await super()._step(step=step, future_for_init=future_for_init)
        finally:
            self._report_round(step, current)

    async def _aggregate_with_group(self, group_info, *args, **kwargs):
        current = _CURRENT_ROUND.get()
        started = time.perf_counter()
        if current is not None:
            current["attempts"] += 1
            current["allreduce_started"] = time.time()
            current["group_size"] = len(group_info.peer_ids)
            current["traffic_before"] = self._traffic()
        try:
            gathered = await super()._aggregate_with_group(group_info, *args, **kwargs)
            if current is not None:
                current["received"] = self._received_fraction(group_info)
            return gathered
        finally:
            if current is not None:
                current["allreduce_seconds"] = time.perf_counter() - started
                before, after = current.pop("traffic_before", None), self._traffic()
                if before is not None and after is not None:
                    current["traffic"] = after.since(before)

    def _traffic(self):
        """The host's Hivemind bytes so far (None: not counted); a few milliseconds, at a round's edges."""
        counter = self.traffic_counter
        return counter.read() if counter is not None else None

    def _received_fraction(self, group_info) -> float | None:
        """Share of the averaged results this peer received in the group's all-reduce (None: unknown).

        Hivemind lets an all-reduce end when a member's part never came (it logs "Averaging: received 0.0%
        results") and reports the round done; the peer then keeps its own values for the missing parts. Seen
        after a network partition: counted here as a failed round, not an ok one.
        """
        try:
            runner = self._running_groups[group_info.group_id].result()
            container = runner.tensor_part_container
            return 1.0 - container.failed_size / max(1, container.total_size)
        except Exception:  # the round's record must not depend on it
            return None

    def _report_round(self, step, current: dict[str, Any]) -> None:
        if self.round_queue is None:
            return
        try:
            outcome, error = _outcome_of(step)
            received = current.get("received")
            if outcome == "ok" and received is not None and received < 1.0:
                outcome = "failed"
                share = f"{math.floor(received * 1000) / 10:.1f}%"  # rounded down: never "100.0%"
                error = f"{PARTIAL_ERROR} received {share} of the averaged results (Hivemind counted it done)"
            record = ChildRound(
                uid=int(step._uid),
                kind=self.round_kind,
                started=current["started"],
                ended=time.time(),
                outcome=outcome,
                group_size=current.get("group_size"),
                allreduce_started=current.get("allreduce_started"),
                allreduce_seconds=current.get("allreduce_seconds"),
                attempts=current["attempts"],
                error=error,
                received=received,
                sent_bytes=current["traffic"].sent if "traffic" in current else None,
                received_bytes=current["traffic"].received if "traffic" in current else None,
            )
            self.round_queue.put_nowait(record)
        except Exception:  # never break an averaging round because its timing could not be sent
            log.exception("could not report an averaging round")


def _outcome_of(step) -> tuple[str, str | None]:
    from hivemind.utils import get_dht_time

    if step.cancelled():
        return "cancelled", None
    if not step.done():
        return "failed", "round left pending"
    exception = step.exception()
    if exception is None:
        return "ok", None
    error = f"{type(exception).__name__}: {exception}".strip()[:200]
    if isinstance(exception, TimeoutError) or get_dht_time() >= step.deadline:
        return "timeout", error
    return "failed", error


def averager_classes() -> tuple[type, type]:
    """(gradient averager class, state averager class) with round timing mixed in."""
    from hivemind.optim.grad_averager import GradientAverager
    from hivemind.optim.state_averager import TrainingStateAverager

    class TimedGradientAverager(RoundTimingMixin, GradientAverager):
        round_kind = KIND_GRADIENTS

    class TimedStateAverager(RoundTimingMixin, TrainingStateAverager):
        round_kind = KIND_PARAMETERS

    return TimedGradientAverager, TimedStateAverager


# ------------------------------------------------------------------------------------------ training process


@dataclass
class RoundTiming:
    """A finished round, merged from the averager child and the training process."""

    timestamp: float
    epoch: int
    kind: str
    outcome: str
    group_size: int | None
    matchmaking_seconds: float | None
    allreduce_seconds: float | None
    blocking_seconds: float | None
    error: str | None
    cause: str | None = None  # derived from the others when None (experiment.results.failure_cause)
    received_share: float | None = None
    sent_bytes: int | None = None
    received_bytes: int | None = None
    sent_mbit_per_second: float | None = None


@dataclass
class _MainSide:
    epoch: int | None = None
    blocking: float = 0.0
    finished: bool = False  # the training process will not wait for this round any more


@dataclass
class RoundCollector:
    """Collects ChildRounds from the averagers and the training process's waits; emits merged RoundTimings.

    Create it (``install()``) before the hivemind averagers start: the queue must exist before they fork.
    """

    hold_seconds: float = 120.0  # emit a round even if the training process never reported it finished
    rounds_cancelled: int = 0
    _queue: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _main: dict[int, _MainSide] = field(default_factory=dict)
    _waiting: list[ChildRound] = field(default_factory=list)
    _missed: list[RoundTiming] = field(default_factory=list)

    def install(self, *averager_classes_: type, traffic_counter: Any = None) -> None:
        self._queue = multiprocessing.get_context("fork").Queue()
        for cls in averager_classes_:
            cls.round_queue = self._queue
            cls.traffic_counter = traffic_counter

    # -- called from the training process (main thread or the state averager's executor thread)

    def note_epoch(self, uid: int, epoch: int) -> None:
        with self._lock:
            self._main.setdefault(uid, _MainSide()).epoch = epoch

    def add_blocking(self, uid: int, seconds: float) -> None:
        with self._lock:
            self._main.setdefault(uid, _MainSide()).blocking += seconds

    def mark_finished(self, uid: int) -> None:
        with self._lock:
            self._main.setdefault(uid, _MainSide()).finished = True

    def expect(self, uid: int) -> None:
        """A round the training process may still wait for: hold its row until mark_finished."""
        with self._lock:
            self._main.setdefault(uid, _MainSide())

    def note_missed_epoch(self, timing: RoundTiming) -> None:
        """An epoch the training process lost without a round (it was behind): reported with the rounds."""
        with self._lock:
            self._missed.append(timing)

    def poll(self, current_epoch: int, *, final: bool = False) -> list[RoundTiming]:
        """Drain the queue; return the rounds whose timings are complete (all of them when ``final``)."""
        with self._lock:
            missed, self._missed = self._missed, []
        if self._queue is None:
            return missed
        while True:
            try:
                self._waiting.append(self._queue.get_nowait())
            except queue.Empty:
                break
            except (EOFError, OSError):
                break
        ready: list[RoundTiming] = []
        keep: list[ChildRound] = []
        now = time.time()
        with self._lock:
            for child in self._waiting:
                main = self._main.get(child.uid)
                held = main is not None and not main.finished and child.kind == KIND_PARAMETERS
                if held and not final and now - child.ended < self.hold_seconds:
                    keep.append(child)
                    continue
                self._main.pop(child.uid, None)
                if child.outcome == "cancelled":
                    self.rounds_cancelled += 1
                    continue
                ready.append(_merge(child, main, current_epoch))
            self._waiting = keep
        return missed + ready


def _merge(child: ChildRound, main: _MainSide | None, current_epoch: int) -> RoundTiming:
    matchmaking = None
    if child.allreduce_started is not None:
        matchmaking = max(0.0, child.allreduce_started - child.started)
    elif child.outcome != "ok":
        matchmaking = max(0.0, child.ended - child.started)  # never found a group: all of it was matchmaking
    return RoundTiming(
        timestamp=child.ended,
        epoch=main.epoch if main is not None and main.epoch is not None else current_epoch,
        kind=child.kind,
        outcome=child.outcome,
        group_size=child.group_size,
        matchmaking_seconds=matchmaking,
        allreduce_seconds=child.allreduce_seconds,
        blocking_seconds=main.blocking if main is not None else 0.0,
        error=child.error,
        received_share=child.received,
        sent_bytes=child.sent_bytes,
        received_bytes=child.received_bytes,
        sent_mbit_per_second=_mbit_per_second(child.sent_bytes, child.allreduce_seconds),
    )


def _mbit_per_second(sent_bytes: int | None, seconds: float | None) -> float | None:
    """The rate the all-reduce sent at, as measured here (the report gives it in modelled time).

    >>> _mbit_per_second(2_500_000, 2.0), _mbit_per_second(None, 2.0), _mbit_per_second(10, 0.0)
    (10.0, None, None)
    """
    if sent_bytes is None or not seconds:
        return None
    return sent_bytes * 8 / seconds / 1e6


# ------------------------------------------------------------------------------------------ the optimizer
