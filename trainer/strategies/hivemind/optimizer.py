"""``hivemind.Optimizer`` instrumented per round, and how a peer leaves the collaboration's last rounds.

The subclass reports the time each step blocks on averaging and which rounds it waited for (to the
RoundCollector of round_timing.py), and makes a lagging peer stop rather than wait for nobody: it skips the
round that would find every other peer finished and releases one that looks for a group once they are
(``_others_finished_without_us``, ``_release_when_others_done``). What it needs for that comes with its
construction: the read of the collective stop epoch and of the others' done announcements (the strategy's,
over the DHT: coordination.py) and the longest wait for a final round's group.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainer.strategies.hivemind.round_timing import (
    KIND_GRADIENTS,
    KIND_PARAMETERS,
    RoundCollector,
    RoundTiming,
)

log = logging.getLogger(__name__)

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
    """The subclass, defined in a function so that hivemind is imported only by a Hivemind peer (seconds;
    ``trainer dht`` and the other strategies never pay them): its length is the class's, method by method."""
    import concurrent.futures

    import hivemind
    from hivemind.averaging.averager import DecentralizedAverager
    from hivemind.averaging.control import AveragingStage

    GROUP_FORMED = (AveragingStage.AWAITING_TRIGGER, AveragingStage.RUNNING_ALLREDUCE)

    class InstrumentedOptimizer(hivemind.Optimizer):
        def __init__(
            self,
            *,
            collector: RoundCollector,
            state_averager_class: type,
            read_stop_epoch: Callable[[], int | None] | None = None,
            others_done: Callable[[], bool] | None = None,
            final_round_wait: float = FINAL_ROUND_WAIT_SECONDS,
            **kwargs: Any,
        ) -> None:
            self.collector = collector
            self._state_averager_class = state_averager_class
            self.step_averaging_seconds = 0.0
            self.counting = True  # False while finishing: waits then are not a training step's
            self._wait_depth = 0  # nested waits (e.g. inside the epoch update) are counted once
            self._parameter_round: int | None = None
            self._behind: tuple[int, int] | None = None  # (local, global epoch) when step found us behind
            #: the collective stop epoch once known (stop_at); see _others_finished_without_us
            self.stop_epoch: int | None = None
            #: reads the freshest stop epoch before each epoch update (the strategy's bounded DHT read)
            self.read_stop_epoch = read_stop_epoch
            #: whether every other peer already finished (the strategy's DHT read of the done announcements)
            self.others_done = others_done
            self.skipped_final_round = False
            #: the longest wait for a final round's group (dilated with the run: trainer/dilation.py)
            self.final_round_wait = final_round_wait
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

        def stop_at(self, epoch: int) -> None:
            """The collective stop epoch, as the coordination reads it (the smallest published one)."""
            self.stop_epoch = epoch

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
