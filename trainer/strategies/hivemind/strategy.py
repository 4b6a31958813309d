"""Collaborative training as one peer of a Hivemind run (``hivemind.Optimizer``, decentralized averaging).

What this strategy adds to the shared loop (trainer/strategies/base.py):

- setup: joins the run's DHT (``--listen``, ``--initial-peers``; unreachable peers are retried for a bounded
  time, then ConnectionError), the bootstrap peer writes ``multiaddrs.txt``, builds ``hivemind.Optimizer``
  with the averagers instrumented per round (round_timing.py, optimizer.py);
- wait_for_start: loads the collaboration's state when the run is already under way, then the start barrier
  (coordination.py). A restarted trainer (``rejoining``: a restart fault or churn, docs/faults.md) first
  waits until its tracker sees the others' progress, then downloads their state, timed and its bytes
  counted (``strategy_details.rejoin``);
- step: one ``Optimizer.step``, the time it blocked on averaging, the rounds that finished, global progress;
- the collective finish: a run ends at an epoch boundary every peer shares. The loop hands its own stop
  conditions over (``finishes_collectively``): the first peer whose max steps (or target loss) is reached
  publishes the next epoch boundary through the DHT and trains on until it (bounded); every peer stops when
  its epoch reaches the published one (its ``stop_reason`` is ``collective_finish``), so the last averaging
  round has everybody in it. A peer that stops for any other reason publishes its current epoch on its way
  out, so the others stop at once instead of waiting for it. A lagging peer whose round toward the stop finds
  every other peer done releases it and stops (optimizer.py), rather than looking for a group until the
  averaging timeout;
- finish: leaves pending rounds cleanly (tag along / cancel, wait for the background parameter round), keeps
  serving for up to ``--finish-grace`` seconds until every peer said it is done, then shuts the averagers,
  the DHT and p2pd down and ends any of their processes that outlived the shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from experiment.results import COMPLETE_EXIT_REASONS, RoundRecord, write_multiaddrs
from trainer.dilation import (
    Dilation,
    dht_options,
    dilated,
    gradient_averager,
    optimizer_options,
    patch_module_constants,
    tracker_metadata_expiration,
)
from trainer.strategies.base import StepOutcome, build_optimizer, parameters_fingerprint
from trainer.strategies.hivemind.internals import check_internals
from trainer.strategies.hivemind.optimizer import FINAL_ROUND_WAIT_SECONDS
from trainer.strategies.hivemind.round_timing import RoundCollector, averager_classes
from trainer.traffic import RunTraffic, TrafficCounter

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.strategies.base import RoundSink

log = logging.getLogger(__name__)

#: joining the DHT through unreachable initial peers is retried for at most this long (and --start-timeout)
JOIN_RETRY_SECONDS = 60.0
#: values of the final parameters kept in the summary (evenly spaced), to compare peers
PARAMETER_SAMPLES = 32
#: seconds between progress reads while the tracker has not found other peers (hivemind's default: 3)
TRACKER_REFRESH_ALONE = 0.5
#: the most seconds between progress reads once it has found other peers (hivemind: 3 s default, 10 s max)
TRACKER_REFRESH_MAX = 3.0
#: steps every peer may take before it has read a stop request from the DHT (reads overlap steps); the stop
#: epoch is the first epoch boundary at least this many steps away, so no peer passes it unaware
STOP_NOTICE_STEPS = 3
#: before each epoch update a peer reads the stop key from the DHT, waiting at most this long
STOP_READ_SECONDS = 2.0
#: after their first step, peers wait at most this long until every tracker counts every expected peer
TRACKER_SYNC_SECONDS = 15.0
#: a rejoining peer waits at most this long for its tracker to see the collaboration's progress
REJOIN_PROGRESS_SECONDS = 30.0


class HivemindStrategy:
    """One peer of a Hivemind collaborative run (see the module docstring)."""

    name = "hivemind"
    finishes_collectively = True

    def __init__(self) -> None:
        #: set by the runner before setup when this start is a restart of a killed trainer; on_rejoined gets
        #: what the state download cost
        self.rejoining = False
        self.on_rejoined: Any = None
        self.config: RunConfig | None = None
        self.model: torch.nn.Module | None = None
        self.dht: Any = None
        self.optimizer: Any = None
        self.coordinator: Any = None
        self.collector = RoundCollector()
        self._on_round: RoundSink | None = None
        # pid → start time of the hivemind processes (DHT, averagers, p2pd)
        self._processes: dict[int, int] = {}
        self._steps = 0
        self._epoch = 0
        self._epoch_started_step = 0
        self._epoch_started_at = 0.0
        self._epoch_log: list[dict[str, float]] = []
        self._own_reason: str | None = None  # our own stop condition, once it held
        self._own_deadline: float | None = None  # bound on training on after request_stop
        self._stop_reason: str | None = None
        self._details: dict[str, Any] = {}
        #: this peer's D (from its settings, in setup) and the strategy's own waits, in this peer's seconds
        self.dilation = Dilation()
        self._waits = {"tracker_sync": TRACKER_SYNC_SECONDS, "stop_read": STOP_READ_SECONDS}

    # ------------------------------------------------------------------ setup

    def setup(self, model: torch.nn.Module, config: RunConfig, on_round: RoundSink) -> None:
        check_internals()
        import hivemind

        from trainer.strategies.hivemind.coordination import STOP_POLL_SECONDS, RunCoordinator
        from trainer.strategies.hivemind.optimizer import instrumented_optimizer_class

        # from here on every duration is this peer's: the modelled one times D (trainer/dilation.py)
        self.dilation = dilation = Dilation.of(config)
        factor = dilation.factor
        config = dilated(config)
        self.config, self.model, self._on_round = config, model, on_round
        self.collector.hold_seconds = 2 * config.averaging_timeout
        grad_averager, state_averager = averager_classes()
        # the queue must exist before the averagers fork, and so must the patched constant; the averagers read
        # the traffic counter at each all-reduce's start and end (trainer/traffic.py)
        self.traffic = TrafficCounter()
        self.collector.install(grad_averager, state_averager, traffic_counter=self.traffic)
        self._details["traffic_counted"] = self.traffic.available
        self.run_traffic = RunTraffic(self.traffic)
        if factor != 1:
            self._details["time_dilation"] = {"factor": factor, **patch_module_constants(factor)}
        self.dht = _join_dht(hivemind, config)
        if not config.initial_peers:
            addresses = [str(address) for address in self.dht.get_visible_maddrs()]
            path = write_multiaddrs(config.results_dir, addresses)
            log.info("bootstrap peer: DHT up, multiaddrs in %s: %s", path, " ".join(addresses))
        self.coordinator = RunCoordinator(
            self.dht,
            config.run_id,
            config.resolved_peer_id,
            peers=config.peers,
            stop_poll_interval=dilation.seconds(STOP_POLL_SECONDS),
        )
        self._waits = {
            "tracker_sync": dilation.seconds(TRACKER_SYNC_SECONDS),
            "stop_read": dilation.seconds(STOP_READ_SECONDS),
        }
        optimizer_class = instrumented_optimizer_class()
        self.optimizer = optimizer_class(
            collector=self.collector,
            state_averager_class=state_averager,
            read_stop_epoch=self._read_stop_epoch,
            others_done=self.coordinator.others_done,
            final_round_wait=dilation.seconds(FINAL_ROUND_WAIT_SECONDS),
            dht=self.dht,
            run_id=config.run_id,
            target_batch_size=config.target_batch_size,
            batch_size_per_step=config.batch_size,
            params=model.parameters(),
            optimizer=lambda params: build_optimizer(config.optimizer, params, config.learning_rate),
            use_local_updates=config.local_updates,
            matchmaking_time=config.matchmaking_time,
            average_state_every=config.average_state_every,
            averaging_timeout=config.averaging_timeout,
            **compression_options(config.compression),
            grad_averager_factory=None if config.local_updates else gradient_averager(grad_averager, factor),
            tracker_opts=tracker_options(config.matchmaking_time, factor),
            verbose=False,
            **optimizer_options(factor, config.matchmaking_time, config.next_chunk_timeout),
        )
        self._remember_processes()

    def _remember_processes(self) -> None:
        for pid in _descendants(list(self.process_roles())):
            started = _start_time(pid)
            if started is not None:
                self._processes[pid] = started

    # ------------------------------------------------------------------ start

    def wait_for_start(self) -> float:
        optimizer, config = self._ready(), self.config
        started = time.monotonic()
        if self.rejoining:
            self._details["rejoin"] = self._download_state()
            if self.on_rejoined is not None:
                self.on_rejoined(self._details["rejoin"])
        elif optimizer.tracker.global_epoch > optimizer.local_epoch:
            log.info("run under way at epoch %d: loading state from peers", optimizer.tracker.global_epoch)
            optimizer.load_state_from_peers()
        self.coordinator.wait_for_peers(config.start_timeout, config.min_peers)
        self._details["started_with_peers"] = self.coordinator.started_with
        self._remember_processes()
        self._epoch = optimizer.local_epoch
        self._epoch_started_at = time.monotonic()
        self.run_traffic.start()
        return time.monotonic() - started

    def _download_state(self) -> dict[str, Any]:
        """A restarted peer: wait (bounded) until its tracker sees the others' epoch, then load the state."""
        from trainer import netcounters

        optimizer = self._ready()
        waited_since = time.monotonic()
        deadline = waited_since + self.dilation.seconds(REJOIN_PROGRESS_SECONDS)
        while optimizer.tracker.global_epoch <= optimizer.local_epoch and time.monotonic() < deadline:
            time.sleep(0.2)
        progress_wait = time.monotonic() - waited_since
        epoch_before = optimizer.local_epoch
        before, downloading = netcounters.snapshot(), time.monotonic()
        optimizer.load_state_from_peers()
        seconds = time.monotonic() - downloading
        after = netcounters.snapshot()
        received = after.received_bytes - before.received_bytes if before and after else None
        log.info(
            "rejoined: state of epoch %d downloaded in %.2f s (%s bytes received), after %.2f s finding it",
            optimizer.local_epoch, seconds, received, progress_wait,
        )  # fmt: skip
        return {
            "progress_wait_seconds": round(progress_wait, 3),
            "state_download_seconds": round(seconds, 3),
            "state_download_bytes": received,
            "epoch_before": epoch_before,
            "epoch_after": optimizer.local_epoch,
            "global_epoch": optimizer.tracker.global_epoch,
        }

    # ------------------------------------------------------------------ steps

    def training_module(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("HivemindStrategy.setup(model, config, on_round) must be called first")
        return self.model

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def zero_grad(self) -> None:
        self._ready().zero_grad()

    def step(self, batch_size: int) -> StepOutcome:
        optimizer = self._ready()
        optimizer.step_averaging_seconds = 0.0
        optimizer.step(batch_size=batch_size)
        self._steps += 1
        if self._steps == 1:
            optimizer.step_averaging_seconds += self._sync_trackers()
        epoch = optimizer.local_epoch
        if epoch != self._epoch:
            self._on_new_epoch(epoch)
        self._report_rounds(epoch)
        stop = self.coordinator.poll_stop()
        if stop is not None:
            optimizer.stop_at(stop.epoch)
        progress = optimizer.tracker.global_progress
        return StepOutcome(
            averaging_seconds=optimizer.step_averaging_seconds,
            hivemind_epoch=epoch,
            peers=max(1, int(progress.num_peers)),
            collective_samples=int(progress.samples_accumulated),
        )

    def _sync_trackers(self) -> float:
        """After the first step: wait (bounded) until every peer's tracker counts every expected peer.

        A peer's progress enters the DHT with its first samples, and a peer whose tracker has not read the
        others' yet thinks it is alone: it fills the first epochs by itself and skips their averaging rounds
        (seen on a loaded machine with short epochs). Every peer waits for all (a second barrier), so none
        runs ahead while another still waits. It is time blocked on the others, so it counts as averaging
        time; also in ``strategy_details.tracker_sync_seconds``.
        """
        tracker, expected = self._ready().tracker, self.coordinator.started_with
        waited = self.coordinator.wait_for_synced(
            lambda: tracker.global_progress.num_peers >= expected, self._waits["tracker_sync"]
        )
        self._details["tracker_sync_seconds"] = round(waited, 3)
        return waited

    def _on_new_epoch(self, epoch: int) -> None:
        now = time.monotonic()
        steps = self._steps - self._epoch_started_step
        self._epoch_log.append(
            {"epoch": epoch, "steps": steps, "seconds": round(now - self._epoch_started_at, 3)}
        )
        self._epoch, self._epoch_started_step, self._epoch_started_at = epoch, self._steps, now

    def _report_rounds(self, epoch: int, *, final: bool = False) -> None:
        for timing in self.collector.poll(epoch, final=final):
            if self._on_round is not None:
                self._on_round(RoundRecord(**asdict(timing)))

    # ------------------------------------------------------------------ the collective finish

    def request_stop(self, reason: str) -> None:
        if self._own_reason is not None:
            return
        optimizer, config = self._ready(), self.config
        self._own_reason = reason
        now_epoch = max(optimizer.local_epoch, optimizer.tracker.global_epoch)
        # another peer's request already published: adopt it rather than publish a different epoch (two
        # requests close together can differ by an epoch, and a peer that read only the larger one before
        # its epoch update would average alone at the smaller one: seen with one-step epochs)
        published = self.coordinator.read_stop(self._waits["stop_read"])
        if published is not None and published.epoch > now_epoch:
            epoch, margin = published.epoch, published.epoch - now_epoch
            log.info("adopting %s's collective stop at epoch %d (%s)", published.peer, epoch, reason)
        else:
            margin = self._stop_margin()
            epoch = now_epoch + margin
            self.coordinator.request_stop(epoch, reason)
        last_epoch = self._epoch_log[-1]["seconds"] if self._epoch_log else config.averaging_timeout
        self._own_deadline = (
            time.monotonic() + (margin + 1) * last_epoch + config.matchmaking_time + config.averaging_timeout
        )

    def _stop_margin(self) -> int:
        """Epochs from now to the stop: the first boundary at least STOP_NOTICE_STEPS steps away.

        Normally the next one; more when epochs are short (with local updates, peers can fall into one
        epoch per step) or the current epoch is nearly over.
        """
        config = self.config
        if self._epoch_log:
            steps_per_epoch = max(1, self._epoch_log[-1]["steps"])
        else:
            steps_per_epoch = max(1, config.target_batch_size // (config.batch_size * config.peers))
        left_in_epoch = max(0, steps_per_epoch - (self._steps - self._epoch_started_step))
        return 1 + math.ceil(max(0, STOP_NOTICE_STEPS - left_in_epoch) / steps_per_epoch)

    def _read_stop_epoch(self) -> int | None:
        stop = self.coordinator.read_stop(self._waits["stop_read"])
        return stop.epoch if stop is not None else None

    def stop_reason(self) -> str | None:
        if self._stop_reason is not None:
            return self._stop_reason
        stop = self.coordinator.poll_stop() if self.coordinator is not None else None
        optimizer = self._ready()
        if stop is not None and (optimizer.local_epoch >= stop.epoch or optimizer.skipped_final_round):
            if optimizer.skipped_final_round:
                log.info("the others finished at epoch %d before this peer got there: stopping", stop.epoch)
            self._stop_reason = self._own_reason or "collective_finish"
        elif self._own_deadline is not None and time.monotonic() >= self._own_deadline:
            log.warning("collective stop not reached in time; stopping on our own (%s)", self._own_reason)
            self._stop_reason = self._own_reason
        return self._stop_reason

    # ------------------------------------------------------------------ finish

    def finish(self, exit_reason: str) -> None:
        started = time.monotonic()
        details = self._details
        details["exit_reason"] = exit_reason
        try:
            if self.optimizer is not None:
                self._leave(exit_reason, details)
        finally:
            self._shutdown(details)
            details["finish_seconds"] = round(time.monotonic() - started, 3)
            log.info("hivemind peer finished in %.1fs (%s)", details["finish_seconds"], exit_reason)

    def _leave(self, exit_reason: str, details: dict[str, Any]) -> None:
        optimizer, config = self.optimizer, self.config
        optimizer.counting = False
        epoch = optimizer.local_epoch
        if self.coordinator.stop is None and exit_reason in COMPLETE_EXIT_REASONS:
            # stopped mid-epoch on our own: everybody stops now
            self.coordinator.request_stop(epoch, exit_reason)
        stop = self.coordinator.stop
        details.update(stop_epoch=stop.epoch if stop else None, stop_requested_by=stop.peer if stop else None)
        released = time.monotonic()
        optimizer.release_scheduled_rounds()
        pending = time.monotonic()
        optimizer.wait_for_background_rounds(config.averaging_timeout)
        details["pending_rounds_seconds"] = round(time.monotonic() - pending, 3)
        details["release_seconds"] = round(pending - released, 3)
        details.update(parameters_fingerprint(self.model, PARAMETER_SAMPLES))
        details["hivemind_epoch"] = optimizer.local_epoch
        self.coordinator.announce_done(exit_reason, optimizer.local_epoch)
        grace = config.finish_grace if exit_reason in COMPLETE_EXIT_REASONS else 0.0
        waited, done, expected = self.coordinator.wait_for_others_done(grace)
        details.update(grace_seconds=round(waited, 3), peers_done=done, peers_expected=expected)
        # the run's Hivemind bytes from the start barrier to here (trainer/traffic.py; None: not counted)
        details["traffic"] = self.run_traffic.stop()
        self._report_rounds(optimizer.local_epoch)

    def _shutdown(self, details: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            self._remember_processes()
        if self.optimizer is not None:
            try:
                self.optimizer.shutdown()
            except Exception:
                log.exception("hivemind optimizer shutdown failed")
        if self.dht is not None:
            try:
                self.dht.shutdown()
            except Exception:
                log.exception("DHT shutdown failed")
        if self.optimizer is not None:
            self._report_rounds(self.optimizer.local_epoch, final=True)
            details["rounds_cancelled"] = self.collector.rounds_cancelled
        details["processes_killed"] = _end_processes(self._processes)
        details["epochs"] = self._epoch_log

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        """The torch optimizer inside hivemind's state averager (its own averaged copies are not counted)."""
        return self.optimizer.state_averager.optimizer if self.optimizer is not None else None

    def process_roles(self) -> dict[int, str]:
        """Hivemind's DHT process (p2pd runs below it) and the averagers' processes."""
        processes = {"dht": self.dht}
        if self.optimizer is not None:
            processes.update(
                state_averager=self.optimizer.state_averager, grad_averager=self.optimizer.grad_averager
            )
        return {pid: role for role, process in processes.items() if (pid := getattr(process, "pid", None))}

    def summary_details(self) -> dict[str, Any]:
        """Extra facts for summary.json (``strategy_details``): why and where the run stopped, the finish."""
        return dict(self._details)

    def _ready(self) -> Any:
        if self.optimizer is None:
            raise RuntimeError("HivemindStrategy.setup(model, config, on_round) must be called first")
        return self.optimizer


#: ``compression`` (experiment/variables.py COMPRESSIONS) -> the hivemind.compression class
COMPRESSION_CLASSES = {
    "none": "NoCompression",
    "fp16": "Float16Compression",
    "scaled_fp16": "ScaledFloat16Compression",
    "uint8": "Uniform8BitQuantization",
    "quantile8": "Quantile8BitQuantization",
    "blockwise8": "BlockwiseQuantization",
}


def compression_options(name: str) -> dict[str, Any]:
    """``hivemind.Optimizer`` keyword arguments: one compression for all it sends, the gradients (their
    averager), the parameters and optimizer state (the state averager) and the state a peer downloads.

    >>> sorted(compression_options("fp16"))
    ['grad_compression', 'load_state_compression', 'state_averaging_compression']
    >>> type(compression_options("uint8")["grad_compression"]).__name__
    'Uniform8BitQuantization'
    """
    import hivemind.compression

    compression = getattr(hivemind.compression, COMPRESSION_CLASSES[name])()
    return {
        "grad_compression": compression,
        "state_averaging_compression": compression,
        "load_state_compression": compression,
    }


# ---------------------------------------------------------------------- DHT


def tracker_options(matchmaking_time: float, factor: float = 1.0) -> dict[str, float]:
    """Progress-tracker settings that keep the collective's sample count fresh from the first step on.

    hivemind reads the collective progress every 3 s while it has found no other peer, and up to every 10 s
    when its throughput estimate is still poor (the first steps): right after the start barrier each peer
    then runs its first epoch on stale counts, far past the target batch size. Reading every 0.5 s while
    alone and at least once per matchmaking period, and never more than 3 s apart, keeps the first epoch like
    the others (one small DHT read per peer per period). Without the 3 s cap, Hivemind's default matchmaking
    time (15 s) let the trackers miss the start sync (every peer waited its full 15 s) and ran the first epoch
    to ~4x the target batch size (make demo, docs/fair-cpu.md).

    Dilated by ``factor`` (trainer/dilation.py; ``matchmaking_time`` is then the dilated one): every period
    and the lifetime of the progress records, so the tracker reads as often in modelled time.

    >>> [tracker_options(m)["max_refresh_period"] for m in (0.5, 2.0, 15.0)]
    [1.0, 2.0, 3.0]
    >>> tracker_options(8 * 2.0, 8)["max_refresh_period"], tracker_options(8 * 2.0, 8)["min_refresh_period"]
    (16.0, 4.0)
    """
    periods = {
        "default_refresh_period": TRACKER_REFRESH_ALONE * factor,
        "max_refresh_period": min(TRACKER_REFRESH_MAX * factor, max(1.0 * factor, matchmaking_time)),
    }
    if factor == 1:
        return periods
    alone = {"min_refresh_period": TRACKER_REFRESH_ALONE * factor}
    return {**alone, **periods, **tracker_metadata_expiration(factor)}


def _join_dht(hivemind: Any, config: RunConfig) -> Any:
    """Start this peer's DHT; retry unreachable initial peers for a bounded time, then ConnectionError."""
    bound = min(JOIN_RETRY_SECONDS, config.start_timeout)
    deadline = time.monotonic() + bound
    attempts = 0
    while True:
        attempts += 1
        # every peer starts at once and the bootstrap peer's DHT listens a second or more later: an attempt
        # before that starts a DHT daemon only to fail, so wait for its port first
        _wait_until_listening(config.initial_peers, deadline)
        try:
            return hivemind.DHT(
                start=True,
                host_maddrs=[config.listen],
                initial_peers=list(config.initial_peers) or None,
                identity_path=config.identity_path or None,
                **dht_options(config.time_dilation),
            )
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if not config.initial_peers:
                raise ConnectionError(f"cannot start the DHT on {config.listen}: {reason}") from exc
            if time.monotonic() >= deadline:
                peers = " ".join(config.initial_peers)
                raise ConnectionError(
                    f"cannot reach the initial peers after {attempts} attempts in {bound:g}s: {reason} "
                    f"(initial_peers={peers})"
                ) from exc
            log.warning("joining the DHT failed (%s); retrying", reason)
            time.sleep(0.5)


def _wait_until_listening(multiaddrs: Sequence[str], deadline: float) -> bool:
    """Wait until one of ``multiaddrs`` (``/ip4/<address>/tcp/<port>/...`` or ``/ip6/...``) accepts a TCP
    connection, checking every 0.1 s, or until ``deadline`` (time.monotonic()); False when none did. An
    address of another form counts as listening (the DHT's own attempt says what is wrong with it)."""
    targets = []
    for multiaddr in multiaddrs:
        found = re.match(r"^/ip[46]/([^/]+)/tcp/(\d+)(/|$)", multiaddr)
        if found is None:
            return True
        targets.append((found.group(1), int(found.group(2))))
    while targets:
        for address, port in targets:
            with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


# ---------------------------------------------------------------------- processes


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _descendants(roots: list[int]) -> list[int]:
    """The given processes and all their descendants."""
    children = _children_map()
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _end_processes(processes: dict[int, int], wait_seconds: float = 5.0) -> int:
    """End hivemind's processes (DHT, averagers, p2pd) that outlived their shutdown; returns how many."""

    def alive() -> list[int]:
        return [pid for pid, started in processes.items() if _start_time(pid) == started and not _zombie(pid)]

    deadline = time.monotonic() + wait_seconds
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = alive()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        until = time.monotonic() + 2.0
        while alive() and time.monotonic() < until:
            time.sleep(0.1)
        if not alive():
            break
    if leftover:
        log.warning("ended %d hivemind processes that outlived the shutdown: %s", len(leftover), leftover)
    return len(leftover)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
