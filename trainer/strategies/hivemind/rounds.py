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

:func:`check_internals` fails loudly when any of these internals differ from the pinned version.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import inspect
import logging
import math
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from experiment.results import PARTIAL_ERROR

log = logging.getLogger(__name__)

HIVEMIND_VERSION = "1.1.12"
#: the round that would take a peer to the collective stop, with no group formed yet and the tracker not
#: showing the others there: wait at most this long (and the matchmaking time) for a group or for the others
#: to announce they are done (then the round would find nobody and is skipped)
FINAL_ROUND_WAIT_SECONDS = 5.0
FINAL_ROUND_POLL_SECONDS = 0.2
#: how often a lagging peer's gradient round toward the collective stop, while it looks for a group, asks
#: whether every other peer announced it is done (then nobody will join it: it is released)
RELEASE_POLL_SECONDS = 0.5


class OthersFinishedWithoutUs(Exception):
    """Ends hivemind's epoch update after a lagging peer's round was released (every other peer is done):
    no optimizer step and no parameter round follow; the peer stops."""


#: Source digests of the hivemind functions whose behaviour this module (and the strategy) relies on or
#: copies. A new hivemind release changes them; then re-read the functions and update the digests.
SOURCE_DIGESTS = {
    "hivemind.averaging.averager.DecentralizedAverager._step": "ad7d195acd6709ea",
    "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group": "0b9ff15fd3fc9676",
    "hivemind.optim.state_averager.TrainingStateAverager._do": "de445bef80f83979",
    "hivemind.optim.state_averager.TrainingStateAverager.step": "3bb85ef8917e9e94",
    "hivemind.optim.optimizer.Optimizer._make_state_averager": "4e2d2b03cefe5998",
    "hivemind.optim.optimizer.Optimizer._update_global_epoch": "0786ab6afe75a7e9",
    "hivemind.optim.optimizer.Optimizer._average_gradients_and_load_into_optimizer": "c0459b56003a2596",
    "hivemind.optim.optimizer.Optimizer.step": "6b146b3259d5d1a8",
    "hivemind.optim.optimizer.Optimizer.load_state_from_peers": "a8b8111272110a54",
    "hivemind.optim.optimizer.Optimizer._should_load_state_from_peers": "b2e4777a62232f54",
    "hivemind.optim.optimizer.Optimizer.shutdown": "96caf836566823f4",
    "hivemind.optim.optimizer.Optimizer._tag_along_with_zero_weight": "771183d83e9de9ef",
}

#: Parameter names (in order) of the internals the instrumentation overrides or calls.
SIGNATURES = {
    "hivemind.averaging.averager.DecentralizedAverager._step": ("self", "step", "future_for_init"),
    "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group": (
        "self",
        "group_info",
        "min_vector_size",
        "kwargs",
    ),
    "hivemind.averaging.averager.DecentralizedAverager.step": (
        "self",
        "gather",
        "scheduled_time",
        "weight",
        "timeout",
        "allow_retries",
        "require_trigger",
        "wait",
    ),
    "hivemind.optim.state_averager.TrainingStateAverager._do": (
        "self",
        "wait_for_trigger",
        "optimizer_step",
        "zero_grad",
        "averaging_round",
        "averaging_control",
        "grad_scaler",
        "set_to_none",
        "timeout",
        "kwargs",
    ),
    "hivemind.optim.optimizer.Optimizer._update_global_epoch": ("self", "grad_scaler"),
    "hivemind.optim.optimizer.Optimizer._average_gradients_and_load_into_optimizer": (
        "self",
        "maybe_step_control",
    ),
    "hivemind.optim.optimizer.Optimizer._make_state_averager": ("self", "kwargs"),
    "hivemind.optim.optimizer.Optimizer.load_state_from_peers": ("self", "kwargs"),
    "hivemind.optim.optimizer.Optimizer._should_load_state_from_peers": ("self",),
}

#: Keyword parameters the strategy passes (the functions take more).
KEYWORDS = {
    "hivemind.optim.optimizer.Optimizer.__init__": (
        "grad_averager_factory",
        "tracker_opts",
        "use_local_updates",
        "matchmaking_time",
        "averaging_timeout",
        "average_state_every",
        "target_batch_size",
        "batch_size_per_step",
        # compression (strategy.py compression_options)
        "grad_compression",
        "state_averaging_compression",
        "load_state_compression",
        # time dilation (trainer/dilation.py)
        "next_chunk_timeout",
        "load_state_timeout",
        "shutdown_timeout",
        "averager_opts",
    ),
    "hivemind.optim.progress_tracker.ProgressTracker.__init__": (
        "default_refresh_period",
        "max_refresh_period",
        "min_refresh_period",
        "metadata_expiration",
    ),
    "hivemind.averaging.averager.DecentralizedAverager.__init__": ("request_timeout", "declare_state_period"),
    "hivemind.dht.node.DHTNode.create": (
        "wait_timeout",
        "bootstrap_timeout",
        "blacklist_time",
        "cache_refresh_before_expiry",
    ),
    "hivemind.dht.dht.DHT.__init__": ("shutdown_timeout",),
    "hivemind.p2p.p2p_daemon.P2P.create": ("idle_timeout", "startup_timeout"),
}

#: Attributes read at run time: (dotted class, attribute names that must exist on the class or its instances).
CLASS_ATTRIBUTES = {
    "hivemind.optim.progress_tracker.GlobalTrainingProgress": ("epoch", "samples_accumulated", "num_peers"),
    "hivemind.averaging.control.StepControl": ("deadline", "triggered", "done", "cancelled", "exception"),
    "hivemind.utils.mpfuture.MPFuture": ("_uid",),
    # an all-reduce's share of results that arrived (see RoundTimingMixin._aggregate_with_group)
    "hivemind.averaging.averager.DecentralizedAverager": ("_running_groups",),
    "hivemind.averaging.allreduce.AllReduceRunner": ("tensor_part_container",),
    "hivemind.averaging.partition.TensorPartContainer": ("failed_size", "total_size"),
}

KIND_GRADIENTS = "gradients"
KIND_PARAMETERS = "parameters"


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ImportError(dotted)


def source_digest(dotted: str) -> str:
    """sha256 (first 16 hex digits) of a function's source, whitespace-normalised."""
    source = inspect.getsource(_resolve(dotted))
    normalised = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


def internals_problems() -> list[str]:
    """Every way the installed hivemind differs from what the instrumentation was written against."""
    import hivemind

    problems: list[str] = []
    if hivemind.__version__ != HIVEMIND_VERSION:
        problems.append(
            f"hivemind=={hivemind.__version__} installed, instrumentation pinned to {HIVEMIND_VERSION}"
        )
    for dotted, expected in SIGNATURES.items():
        try:
            function = _resolve(dotted)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        names = tuple(inspect.signature(function).parameters)
        if names != expected:
            problems.append(f"{dotted} takes {names}, expected {expected}")
    for dotted, names in KEYWORDS.items():
        try:
            accepted = set(inspect.signature(_resolve(dotted)).parameters)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        problems.extend(f"{dotted} no longer takes {name}" for name in names if name not in accepted)
    for dotted in (
        "hivemind.averaging.averager.DecentralizedAverager._step",
        "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group",
    ):
        try:
            if not inspect.iscoroutinefunction(_resolve(dotted)):
                problems.append(f"{dotted} is no longer a coroutine function")
        except (ImportError, AttributeError):
            pass  # reported above
    for dotted, expected_digest in SOURCE_DIGESTS.items():
        try:
            digest = source_digest(dotted)
        except (ImportError, AttributeError, OSError, TypeError) as exc:
            problems.append(f"cannot read the source of {dotted}: {exc}")
            continue
        if digest != expected_digest:
            problems.append(f"{dotted} changed (source digest {digest}, expected {expected_digest})")
    for dotted, names in CLASS_ATTRIBUTES.items():
        try:
            cls = _resolve(dotted)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        problems.extend(
            f"{dotted} has no attribute {name}" for name in names if not _has_attribute(cls, name)
        )
    return problems


def _has_attribute(cls: type, name: str) -> bool:
    """A class attribute, a dataclass field, or an instance attribute its source assigns (``self.NAME``)."""
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    try:
        return f"self.{name}" in inspect.getsource(cls)
    except (OSError, TypeError):
        return False


def check_internals() -> None:
    """Raise RuntimeError listing every difference from the hivemind internals this module relies on."""
    problems = internals_problems()
    if problems:
        raise RuntimeError(
            "hivemind internals changed; averaging-round timing would be wrong: " + "; ".join(problems)
        )


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

_OPTIMIZER_CLASS: type | None = None


def instrumented_optimizer_class() -> type:
    """``hivemind.Optimizer`` reporting the time each step blocks on averaging and which rounds it waited for.

    Extra constructor arguments: ``collector`` (a RoundCollector) and ``state_averager_class`` (the timed
    TrainingStateAverager). After each ``step()``, ``step_averaging_seconds`` holds the time it blocked in
    matchmaking, all-reduce, state averaging or state download (reset it before the step).
    """
    global _OPTIMIZER_CLASS
    if _OPTIMIZER_CLASS is None:
        _OPTIMIZER_CLASS = _define_optimizer_class()
    return _OPTIMIZER_CLASS


def _define_optimizer_class() -> type:
    import concurrent.futures

    import hivemind
    from hivemind.averaging.averager import DecentralizedAverager
    from hivemind.averaging.control import AveragingStage

    GROUP_FORMED = (AveragingStage.AWAITING_TRIGGER, AveragingStage.RUNNING_ALLREDUCE)

    class InstrumentedOptimizer(hivemind.Optimizer):
        def __init__(self, *, collector: RoundCollector, state_averager_class: type, **kwargs: Any) -> None:
            self.collector = collector
            self._state_averager_class = state_averager_class
            self.step_averaging_seconds = 0.0
            self.counting = True  # False while finishing: waits then are not a training step's
            self._wait_depth = 0  # nested waits (e.g. inside the epoch update) are counted once
            self._parameter_round: int | None = None
            self._behind: tuple[int, int] | None = None  # (local, global epoch) when step found us behind
            #: the collective stop epoch once known (set by the strategy); see _others_finished_without_us
            self.stop_epoch: int | None = None
            #: reads the freshest stop epoch before each epoch update (the strategy's bounded DHT read)
            self.read_stop_epoch: Callable[[], int | None] | None = None
            #: whether every other peer already finished (the strategy's DHT read of the done announcements)
            self.others_done: Callable[[], bool] | None = None
            self.skipped_final_round = False
            #: the longest wait for a final round's group (dilated with the run: trainer/dilation.py)
            self.final_round_wait = FINAL_ROUND_WAIT_SECONDS
            super().__init__(**kwargs)
            self._instrument_state_averager()

        # same as hivemind 1.1.12's Optimizer._make_state_averager, with the timed averager class
        def _make_state_averager(self, **kwargs: Any) -> Any:
            return self._state_averager_class(
                dht=self.dht,
                prefix=f"{self.run_id}_state_averager",
                min_matchmaking_time=self.matchmaking_time,
                allreduce_timeout=self.allreduce_timeout,
                shutdown_timeout=self.shutdown_timeout,
                offload_optimizer=self.offload_optimizer,
                custom_gradients=self.offload_optimizer,
                status_loglevel=self.status_loglevel,
                next_chunk_timeout=self.next_chunk_timeout,
                client_mode=self.client_mode,
                auxiliary=self.auxiliary,
                start=True,
                **kwargs,
            )

        @contextlib.contextmanager
        def _waiting(self) -> Iterator[None]:
            """Time a wait on averaging into step_averaging_seconds; a wait inside another is counted once."""
            self._wait_depth += 1
            started = time.perf_counter()
            try:
                yield
            finally:
                self._wait_depth -= 1
                if self._wait_depth == 0 and self.counting:
                    self.step_averaging_seconds += time.perf_counter() - started

        def _update_global_epoch(self, grad_scaler: Any) -> None:
            with self._waiting():
                fresh = self.read_stop_epoch() if self.read_stop_epoch is not None else None
                if fresh is not None:
                    self.stop_epoch = fresh if self.stop_epoch is None else min(fresh, self.stop_epoch)
                if self.stop_epoch is not None and self.local_epoch >= self.stop_epoch:
                    return None  # the collective stops here: no round past the stop epoch
                if self._others_finished_without_us():
                    self.release_scheduled_rounds()
                    self.skipped_final_round = True
                    return None
                try:
                    return super()._update_global_epoch(grad_scaler)
                except OthersFinishedWithoutUs:
                    log.info(
                        "every other peer finished while this peer looked for a group at epoch %d: stopping",
                        self.local_epoch,
                    )
                    self.release_scheduled_rounds()
                    self.skipped_final_round = True
                    return None

        def _others_finished_without_us(self) -> bool:
            """A lagging peer's last gradient round would find nobody: the others passed the stop epoch.

            True when the collective stop epoch is known, this peer has not reached it, no group has formed
            with this peer for its next round (a formed group means others still wait for it), and either
            its tracker shows the others at the stop epoch or, for the round that would take this peer to
            the stop, every other peer has announced it is done. The second case catches a peer whose epoch
            count slipped one behind the others' (it joined their round as its own previous epoch) while its
            tracker's reads lag: it waits, at most ``final_round_wait``, until a group forms or the
            others are done. Not with local updates: there peers reach each epoch independently and join the
            last parameter round after the first one got there.
            """
            stop = self.stop_epoch
            if stop is None or self.use_local_updates or self.local_epoch >= stop:
                return False
            if stop <= self.tracker.global_epoch:
                return not self._group_formed()
            if self.local_epoch + 1 < stop or self.others_done is None:
                return False
            deadline = time.monotonic() + min(self.matchmaking_time, self.final_round_wait)
            while not self._group_formed():
                if self.others_done():
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(FINAL_ROUND_POLL_SECONDS)
            return False

        def _group_formed(self) -> bool:
            control = self.scheduled_grads
            return control is not None and not control.done() and control.stage in GROUP_FORMED

        def _average_gradients_and_load_into_optimizer(self, maybe_step_control: Any) -> None:
            started = time.perf_counter()
            epoch = self.local_epoch
            release = self._release_when_others_done(maybe_step_control)
            try:
                super()._average_gradients_and_load_into_optimizer(maybe_step_control)
            finally:
                released = release is not None and release()
                if maybe_step_control is not None:
                    uid = int(maybe_step_control._uid)
                    self.collector.note_epoch(uid, epoch)
                    self.collector.add_blocking(uid, time.perf_counter() - started)
                    self.collector.mark_finished(uid)
            if released:
                raise OthersFinishedWithoutUs

        def _release_when_others_done(self, control: Any) -> Callable[[], bool] | None:
            """A lagging peer's gradient round toward the collective stop: released once every other peer
            announced it is done while the round still looks for a group. Nobody will join it then, and it
            would wait out the averaging timeout (a slower peer that reached its last round as the others
            finished waited 20 s for nobody, then 20 s more in a parameter round).

            Returns what ends the watch and says whether it released the round; None where no round toward a
            known stop epoch runs (or with local updates, whose last parameter round the others join).
            """
            stop, others_done = self.stop_epoch, self.others_done
            if control is None or stop is None or others_done is None:
                return None
            if self.use_local_updates or self.local_epoch >= stop:
                return None
            finished, released = threading.Event(), threading.Event()

            def watch() -> None:
                while not finished.wait(RELEASE_POLL_SECONDS):
                    if control.done() or control.stage in GROUP_FORMED:
                        return  # it ended, or a group waits for this peer
                    if control.stage == AveragingStage.LOOKING_FOR_GROUP and others_done():
                        released.set()
                        control.cancel()
                        return

            watcher = threading.Thread(target=watch, name="release-lagging-round", daemon=True)
            watcher.start()

            def end() -> bool:
                finished.set()
                watcher.join()
                return released.is_set()

            return end

        def _should_load_state_from_peers(self) -> bool:
            behind = super()._should_load_state_from_peers()
            if behind:
                self._behind = (self.local_epoch, self.tracker.global_epoch)
            return behind

        def load_state_from_peers(self, **kwargs: Any) -> None:
            """When ``step`` found this peer behind, also a failed row for the epoch it lost (its samples)."""
            behind, self._behind = self._behind, None
            started = time.perf_counter()
            try:
                with self._waiting():
                    return super().load_state_from_peers(**kwargs)
            finally:
                if behind is not None and self.counting:
                    self._note_missed_epoch(*behind, seconds=time.perf_counter() - started)

        def _note_missed_epoch(self, local_epoch: int, global_epoch: int, seconds: float) -> None:
            caught_up = self.local_epoch >= self.tracker.global_epoch - 1
            self.collector.note_missed_epoch(
                RoundTiming(
                    timestamp=time.time(),
                    epoch=local_epoch,
                    kind=KIND_GRADIENTS if self.use_gradient_averaging else KIND_PARAMETERS,
                    outcome="failed",
                    group_size=None,
                    matchmaking_seconds=None,
                    allreduce_seconds=None,
                    blocking_seconds=seconds,
                    error=(
                        f"behind: at epoch {local_epoch} while the collaboration was at {global_epoch}; "
                        + (
                            f"loaded the state of epoch {self.local_epoch}"
                            if caught_up
                            else "state not loaded"
                        )
                    ),
                    cause="behind" if caught_up else "state_download",
                )
            )

        def _instrument_state_averager(self) -> None:
            averager = self.state_averager
            original_do, original_step = averager._do, averager.step

            # the background parameter round: name its StepControl (as _do would) to match its timings
            def timed_do(
                wait_for_trigger,
                optimizer_step,
                zero_grad,
                averaging_round,
                averaging_control,
                grad_scaler,
                set_to_none,
                timeout=None,
                **kwargs,
            ):
                uid = None
                if averaging_round:
                    if averaging_control is None or averaging_control.triggered or averaging_control.done():
                        averaging_control = DecentralizedAverager.step(
                            averager,
                            gather=averager.local_epoch,
                            require_trigger=True,
                            timeout=timeout,
                            wait=False,
                            **kwargs,
                        )
                    uid = int(averaging_control._uid)
                    self.collector.expect(uid)
                    self.collector.note_epoch(uid, averager.local_epoch - 1)
                    self._parameter_round = uid
                try:
                    return original_do(
                        wait_for_trigger,
                        optimizer_step,
                        zero_grad,
                        averaging_round,
                        averaging_control,
                        grad_scaler,
                        set_to_none,
                        timeout=timeout,
                        **kwargs,
                    )
                finally:
                    if uid is not None:
                        self.collector.mark_finished(uid)

            # the training step waiting for that background round (before applying its results)
            def timed_step(**kwargs):
                waits = kwargs.get("wait_for_delayed_updates")
                if waits is None:
                    if averager.delta_rule_averaging:
                        waits = any(kwargs.get(k) for k in ("averaging_round", "optimizer_step", "zero_grad"))
                    else:
                        waits = bool(kwargs.get("averaging_round"))
                pending = [update for update in averager.pending_updates if not update.done()]
                uid = self._parameter_round
                if waits and pending and uid is not None:
                    started = time.perf_counter()
                    with self._waiting():
                        concurrent.futures.wait(pending, timeout=self.averaging_timeout)
                    if self.counting:
                        self.collector.add_blocking(uid, time.perf_counter() - started)
                return original_step(**kwargs)

            averager._do = timed_do  # the step executor looks _do up on the instance
            averager.step = timed_step

        # ---------------------------------------------------------------- leaving

        def release_scheduled_rounds(self) -> None:
            """Release pre-scheduled rounds so nobody waits for us: cancel matchmaking, else weight 0."""
            for control in (self.scheduled_grads, self.scheduled_state):
                if control is None or control.done():
                    continue
                if control.stage == AveragingStage.LOOKING_FOR_GROUP:
                    control.cancel()
                else:
                    self._tag_along_with_zero_weight(control)
            self.scheduled_grads = self.scheduled_state = None

        def wait_for_background_rounds(self, timeout: float) -> None:
            """Wait (bounded) for a background parameter round to finish and apply its result."""
            pending = [update for update in self.state_averager.pending_updates if not update.done()]
            if pending:
                concurrent.futures.wait(pending, timeout=timeout)
            self.state_averager.step(wait_for_delayed_updates=False, apply_delayed_updates=True)

    return InstrumentedOptimizer
