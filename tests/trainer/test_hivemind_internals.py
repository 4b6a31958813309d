"""The hivemind internals the round timing relies on, the round bookkeeping, and the DHT coordination keys."""

from __future__ import annotations

import asyncio
import time

import pytest

from trainer.strategies.hivemind import optimizer as hivemind_optimizer
from trainer.strategies.hivemind.internals import HIVEMIND_VERSION, check_internals, internals_problems
from trainer.strategies.hivemind.round_timing import (
    KIND_GRADIENTS,
    KIND_PARAMETERS,
    ChildRound,
    RoundCollector,
    RoundTimingMixin,
)
from trainer.traffic import Traffic

pytestmark = pytest.mark.hivemind


def test_installed_hivemind_matches_the_instrumented_internals():
    import hivemind

    assert hivemind.__version__ == HIVEMIND_VERSION
    assert internals_problems() == []
    check_internals()


def test_a_changed_internal_fails_loudly(monkeypatch):
    from hivemind.averaging.averager import DecentralizedAverager

    async def _aggregate_with_group(self, group_info, **kwargs):  # a different signature and source
        return None

    monkeypatch.setattr(DecentralizedAverager, "_aggregate_with_group", _aggregate_with_group)
    problems = internals_problems()
    assert any("_aggregate_with_group takes" in p for p in problems), problems
    assert any("_aggregate_with_group changed" in p for p in problems), problems
    with pytest.raises(RuntimeError, match="hivemind internals changed"):
        check_internals()


def test_another_hivemind_version_fails_loudly(monkeypatch):
    import hivemind

    monkeypatch.setattr(hivemind, "__version__", "1.2.0")
    with pytest.raises(RuntimeError, match=r"hivemind==1\.2\.0 installed"):
        check_internals()


# ------------------------------------------------------------------------------------------ bookkeeping


def _child(uid: int, kind: str, outcome: str = "ok", **extra) -> ChildRound:
    now = time.time()
    values = dict(
        started=now - 3.0, ended=now, group_size=2, allreduce_started=now - 0.5, allreduce_seconds=0.5
    )
    values.update(extra)
    return ChildRound(uid=uid, kind=kind, outcome=outcome, **values)


def _drain(collector: RoundCollector, epoch: int = 7, *, final: bool = False, tries: int = 50):
    """Poll until the queue's feeder thread delivered what was put (it is asynchronous)."""
    for _ in range(tries):
        found = collector.poll(epoch, final=final)
        if found:
            return found
        time.sleep(0.02)
    return []


class _Averager:
    round_queue = None


def test_collector_merges_child_timings_with_the_training_process_waits():
    collector = RoundCollector()
    collector.install(_Averager)
    assert _Averager.round_queue is not None
    collector.note_epoch(1, 3)
    collector.add_blocking(1, 0.75)
    collector.mark_finished(1)
    _Averager.round_queue.put(_child(1, KIND_GRADIENTS, received=0.75))
    (gradients,) = _drain(collector)
    assert (gradients.kind, gradients.outcome, gradients.epoch, gradients.group_size) == (
        "gradients",
        "ok",
        3,
        2,
    )
    assert gradients.blocking_seconds == 0.75
    assert gradients.allreduce_seconds == 0.5
    assert gradients.matchmaking_seconds == pytest.approx(2.5, abs=1e-6)
    assert gradients.received_share == 0.75  # the share of the result the all-reduce delivered


def test_collector_holds_a_background_round_until_the_training_process_is_done_with_it():
    collector = RoundCollector()
    collector.install(_Averager)
    collector.expect(2)
    collector.note_epoch(2, 4)
    _Averager.round_queue.put(_child(2, KIND_PARAMETERS))
    assert _drain(collector, tries=10) == []  # still held: the next step may wait for it
    collector.add_blocking(2, 0.25)
    collector.mark_finished(2)
    (parameters,) = collector.poll(9)
    assert (parameters.kind, parameters.epoch, parameters.blocking_seconds) == ("parameters", 4, 0.25)


def test_collector_drops_cancelled_rounds_and_keeps_failed_ones():
    collector = RoundCollector()
    collector.install(_Averager)
    _Averager.round_queue.put(_child(3, KIND_GRADIENTS, "cancelled", allreduce_started=None, group_size=None))
    _Averager.round_queue.put(
        _child(4, KIND_GRADIENTS, "timeout", allreduce_started=None, group_size=None, allreduce_seconds=None)
    )
    (failed,) = _drain(collector, epoch=5)
    assert collector.rounds_cancelled == 1
    assert (failed.outcome, failed.epoch, failed.blocking_seconds, failed.group_size) == (
        "timeout",
        5,
        0.0,
        None,
    )
    assert failed.matchmaking_seconds == pytest.approx(3.0, abs=1e-3)  # never found a group: all matchmaking


# ------------------------------------------------------------------------------------------ the child's timer


class _Step:
    """What the mixin reads from hivemind's StepControl."""

    def __init__(self, uid: int, exception: BaseException | None = None, cancelled: bool = False) -> None:
        self._uid = uid
        self._exception = exception
        self._cancelled = cancelled
        self.deadline = float("inf")

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return True

    def exception(self) -> BaseException | None:
        return self._exception


class _Group:
    peer_ids = ("a", "b", "c")


class _FakeAveragerBase:
    """Stands in for DecentralizedAverager: a round is matchmaking (a sleep) then the all-reduce."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    async def _step(self, *, step, future_for_init):
        await asyncio.sleep(0.05)  # matchmaking
        await asyncio.wait_for(self._aggregate_with_group(_Group(), min_vector_size=0), timeout=5)

    async def _aggregate_with_group(self, group_info, min_vector_size, **kwargs):
        await asyncio.sleep(0.1)
        if self.fail is not None:
            raise self.fail


class _TimedFake(RoundTimingMixin, _FakeAveragerBase):
    round_kind = KIND_GRADIENTS


def test_the_averager_mixin_times_matchmaking_and_all_reduce_separately():
    collector = RoundCollector()
    collector.install(_TimedFake)
    asyncio.run(_TimedFake()._step(step=_Step(11), future_for_init=None))
    asyncio.run(_TimedFake()._step(step=_Step(12, exception=TimeoutError("slow peer")), future_for_init=None))
    rounds = []
    deadline = time.monotonic() + 5
    while len(rounds) < 2 and time.monotonic() < deadline:
        rounds += collector.poll(0, final=True)
        time.sleep(0.02)
    rounds.sort(key=lambda r: r.outcome)
    assert [r.outcome for r in rounds] == ["ok", "timeout"], rounds
    ok = rounds[0]
    assert ok.group_size == 3
    assert 0.09 < ok.allreduce_seconds < 1.0
    assert 0.04 < ok.matchmaking_seconds < 1.0
    assert "slow peer" in rounds[1].error


class _Counter:
    """Stands in for trainer.traffic.TrafficCounter: 1 MB more sent and 2 MB more received at each reading."""

    def __init__(self) -> None:
        self.readings = 0

    def read(self) -> Traffic:
        self.readings += 1
        return Traffic(self.readings * 1_000_000, self.readings * 2_000_000)


def test_the_averager_mixin_counts_each_all_reduces_bytes_and_rate():
    """The host's Hivemind bytes read as the all-reduce starts and as it ends; the round carries
    their difference and the rate it was sent at (a round without a counter carries none)."""

    def one_round(counter: _Counter | None) -> list:
        collector = RoundCollector()
        collector.install(_TimedFake, traffic_counter=counter)
        asyncio.run(_TimedFake()._step(step=_Step(21), future_for_init=None))
        rounds, deadline = [], time.monotonic() + 5
        while not rounds and time.monotonic() < deadline:
            rounds += collector.poll(0, final=True)
            time.sleep(0.02)
        return rounds

    (counted,) = one_round(_Counter())
    (uncounted,) = one_round(None)
    assert (counted.sent_bytes, counted.received_bytes) == (1_000_000, 2_000_000)
    rate = counted.sent_mbit_per_second
    assert rate == pytest.approx(8 / counted.allreduce_seconds) and 8 < rate < 80  # 1 MB in 0.1-1 s
    assert (uncounted.sent_bytes, uncounted.received_bytes, uncounted.sent_mbit_per_second) == (None,) * 3


# ------------------------------------------------------------------------------------------ DHT coordination


@pytest.fixture(scope="module")
def dht():
    import hivemind

    node = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    yield node
    node.shutdown()


def test_barrier_times_out_naming_who_arrived(dht):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    alone = RunCoordinator(dht, "barrier-run", "solo", peers=2, poll_interval=0.1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"1 of 2 expected peers arrived \(solo\)"):
        alone.wait_for_peers(1.0)
    assert 1.0 <= time.monotonic() - started < 5.0


def test_barrier_timeout_with_min_peers_starts_with_those_that_came(dht):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    first = RunCoordinator(dht, "min-run", "one", peers=3, poll_interval=0.1)
    first._store(first.barrier_key, {"peer": "one", "time": time.time()})
    second = RunCoordinator(dht, "min-run", "two", peers=3, poll_interval=0.1)
    second.subkey = "two/other-peer"
    with pytest.raises(TimeoutError, match=r"2 of 3 expected peers arrived"):
        second.wait_for_peers(0.5, min_peers=3)  # not enough for min_peers: the run gives up as before
    assert second.started_with == 3
    waited = second.wait_for_peers(0.5, min_peers=2)
    assert 0.5 <= waited < 3.0 and second.started_with == 2 and second.released_at is not None


def test_a_min_peers_release_is_everyones(dht):
    """The first peer whose timeout passes with min_peers arrived starts the others still waiting with it."""
    from trainer.strategies.hivemind.coordination import RunCoordinator

    early = RunCoordinator(dht, "release-run", "early", peers=3, poll_interval=0.1)
    late = RunCoordinator(dht, "release-run", "late", peers=3, poll_interval=0.1)
    late.subkey = "late/other-peer"
    late._store(late.barrier_key, {"peer": "late", "time": time.time()})
    assert early.wait_for_peers(0.5, min_peers=2) < 3.0 and early.started_with == 2
    waited = late.wait_for_peers(60.0, min_peers=2)  # released by early's record, not by its own timeout
    assert waited < 5.0 and late.started_with == 2 and late.released_at is not None


def test_barrier_releases_when_enough_peers_announced(dht):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    first = RunCoordinator(dht, "pair-run", "one", peers=2, poll_interval=0.1)
    first._store(first.barrier_key, {"peer": "one", "time": time.time()})
    second = RunCoordinator(dht, "pair-run", "two", peers=2, poll_interval=0.1)
    second.subkey = "two/other-peer"  # a second peer on the same DHT node
    assert second.wait_for_peers(5.0) < 2.0
    assert second.released_at is not None


def test_the_smallest_published_stop_epoch_wins(dht):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    early = RunCoordinator(dht, "stop-run", "early", peers=2, poll_interval=0.05)
    late = RunCoordinator(dht, "stop-run", "late", peers=2, poll_interval=0.05)
    late.subkey = "late/other-peer"
    late.request_stop(9, "target_loss")
    early.request_stop(6, "max_steps")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (late.poll_stop() is None or late.stop.epoch != 6):
        time.sleep(0.05)
    assert (late.stop.epoch, late.stop.peer, late.stop.reason) == (6, "early", "max_steps")


def test_waiting_for_others_to_finish_is_bounded(dht):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    done = RunCoordinator(dht, "done-run", "a", peers=2, poll_interval=0.05)
    done.announce_done("max_steps", 4)
    waited, finished, expected = done.wait_for_others_done(1.0)
    assert (finished, expected) == (1, 2) and 1.0 <= waited < 3.0
    assert not done.others_done()  # its own announcement does not count
    other = RunCoordinator(dht, "done-run", "b", peers=2, poll_interval=0.05)
    other.subkey = "b/other-peer"
    assert other.others_done()  # a's announcement is there
    other.announce_done("collective_finish", 4)
    assert done.others_done()
    waited, finished, expected = done.wait_for_others_done(5.0)
    assert (finished, expected) == (2, 2) and waited < 1.0


def test_the_synced_barrier_waits_for_every_tracker_and_is_bounded(dht, caplog):
    from trainer.strategies.hivemind.coordination import RunCoordinator

    counts = {"value": False}
    first = RunCoordinator(dht, "sync-run", "one", peers=2, poll_interval=0.05)
    # its tracker never counts everyone: bounded, announced nothing, says whose tracker lags
    waited = first.wait_for_synced(lambda: counts["value"], 0.5)
    assert 0.5 <= waited < 2.0 and "ours does not count every peer" in caplog.text
    assert first._entries(first.synced_key) == {}
    # it counts everyone, the other peer has not announced yet: still waits, the others' trackers lag
    counts["value"] = True
    waited = first.wait_for_synced(lambda: counts["value"], 0.5)
    assert 0.5 <= waited < 2.0 and "the others' trackers lag" in caplog.text
    second = RunCoordinator(dht, "sync-run", "two", peers=2, poll_interval=0.05)
    second.subkey = "two/other-peer"
    assert second.wait_for_synced(lambda: True, 5.0) < 1.0
    assert first.wait_for_synced(lambda: True, 5.0) < 1.0


# ------------------------------------------------------------------------------------------ the lagging peer


class _Control:
    def __init__(self, stage) -> None:
        self.stage = stage

    def done(self) -> bool:
        return False


def _optimizer_state(
    local: int, global_: int, stop: int | None, *, local_updates=False, control=None, others_done=None
):
    from types import MethodType, SimpleNamespace

    state = SimpleNamespace(
        stop_epoch=stop,
        use_local_updates=local_updates,
        local_epoch=local,
        tracker=SimpleNamespace(global_epoch=global_),
        scheduled_grads=control,
        matchmaking_time=0.5,
        final_round_wait=hivemind_optimizer.FINAL_ROUND_WAIT_SECONDS,
        others_done=others_done,
    )
    state._group_formed = MethodType(hivemind_optimizer.instrumented_optimizer_class()._group_formed, state)
    return state


def _others_done_after(reads: list[int]):
    """others_done() stand-ins: ``done_after(n)`` says the others are done from its n-th read on (each read
    appended to ``reads``)."""

    def done_after(n: int):
        def others_done() -> bool:
            reads.append(n)
            return len(reads) >= n

        return others_done

    return done_after


def test_a_lagging_peer_skips_only_a_round_nobody_will_join():
    from hivemind.averaging.control import AveragingStage

    decide = hivemind_optimizer.instrumented_optimizer_class()._others_finished_without_us
    assert decide(_optimizer_state(2, 3, stop=3)) is True  # the others reached the stop epoch without it
    assert decide(_optimizer_state(2, 3, stop=None)) is False  # no collective stop yet: a normal transition
    assert decide(_optimizer_state(2, 2, stop=3)) is False  # nobody got there yet: this is the last round
    assert decide(_optimizer_state(3, 3, stop=3)) is False  # already there
    assert decide(_optimizer_state(2, 3, stop=3, local_updates=True)) is False  # LU: it joins the last round
    formed = _Control(AveragingStage.AWAITING_TRIGGER)
    assert decide(_optimizer_state(2, 3, stop=3, control=formed)) is False  # a group waits for this peer
    looking = _Control(AveragingStage.LOOKING_FOR_GROUP)
    assert decide(_optimizer_state(2, 3, stop=3, control=looking)) is True


def test_a_peer_one_epoch_behind_whose_tracker_lags_skips_the_last_round_once_the_others_are_done():
    """The others stopped at epoch 3 while this peer counts 2 and its tracker still
    shows 2; their done announcements decide. Bounded: it goes on to the round when they are not done."""
    from hivemind.averaging.control import AveragingStage

    decide = hivemind_optimizer.instrumented_optimizer_class()._others_finished_without_us
    reads: list[int] = []
    done_after = _others_done_after(reads)

    looking = _Control(AveragingStage.LOOKING_FOR_GROUP)
    assert decide(_optimizer_state(2, 2, stop=3, control=looking, others_done=done_after(2))) is True
    assert len(reads) == 2  # polled until the others' announcements arrived
    reads.clear()
    started = time.monotonic()
    assert decide(_optimizer_state(2, 2, stop=3, others_done=lambda: False)) is False  # nobody done: round
    assert 0.4 <= time.monotonic() - started < 2  # waited the matchmaking time (0.5 s), no longer
    formed = _Control(AveragingStage.AWAITING_TRIGGER)
    assert decide(_optimizer_state(2, 2, stop=3, control=formed, others_done=done_after(1))) is False
    assert not reads  # a formed group: no read at all
    assert decide(_optimizer_state(1, 1, stop=3, others_done=done_after(1))) is False  # not the last round
    assert not reads


class _Round(_Control):
    """A round's StepControl: cancel() ends it."""

    def __init__(self, stage) -> None:
        super().__init__(stage)
        self.cancelled = False

    def done(self) -> bool:
        return self.cancelled

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_a_lagging_peers_round_is_released_once_every_other_peer_is_done(monkeypatch):
    """The slower peer of tests/e2e's four-peer run reached its last gradient round as the others finished:
    its round looked for a group for the whole averaging timeout. It is released (cancelled) once the others'
    done announcements are all there, and only while it still looks for a group."""
    from hivemind.averaging.control import AveragingStage

    monkeypatch.setattr(hivemind_optimizer, "RELEASE_POLL_SECONDS", 0.02)
    release = hivemind_optimizer.instrumented_optimizer_class()._release_when_others_done
    reads: list[int] = []
    done_after = _others_done_after(reads)

    looking = _Round(AveragingStage.LOOKING_FOR_GROUP)
    end = release(_optimizer_state(2, 2, stop=3, others_done=done_after(3)), looking)
    deadline = time.monotonic() + 5
    while not looking.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert end() is True and looking.cancelled and len(reads) == 3  # released at the third read
    # two epochs behind: the same (the others are done, nobody joins any later round either)
    reads.clear()
    behind = _Round(AveragingStage.LOOKING_FOR_GROUP)
    end = release(_optimizer_state(1, 1, stop=3, others_done=done_after(1)), behind)
    while not behind.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert end() is True and behind.cancelled

    # not released: the others are not done, or a group formed (others wait for this peer)
    reads.clear()
    waiting = _Round(AveragingStage.LOOKING_FOR_GROUP)
    end = release(_optimizer_state(2, 2, stop=3, others_done=lambda: reads.append(0) or False), waiting)
    time.sleep(0.2)
    assert end() is False and not waiting.cancelled and reads  # asked, and asked again
    reads.clear()
    formed = _Round(AveragingStage.RUNNING_ALLREDUCE)
    end = release(_optimizer_state(2, 2, stop=3, others_done=done_after(1)), formed)
    time.sleep(0.1)
    assert end() is False and not formed.cancelled and not reads  # a formed group: no read at all
    # no round to watch: no stop epoch yet, already at it, local updates, or no round handed over
    for state in (
        _optimizer_state(2, 2, stop=None, others_done=done_after(1)),
        _optimizer_state(3, 3, stop=3, others_done=done_after(1)),
        _optimizer_state(2, 2, stop=3, local_updates=True, others_done=done_after(1)),
    ):
        assert release(state, _Round(AveragingStage.LOOKING_FOR_GROUP)) is None
    assert release(_optimizer_state(2, 2, stop=3, others_done=done_after(1)), None) is None


def test_a_restarted_peer_counts_once_at_the_barrier_and_when_done(dht):
    """A restarted trainer announces itself again under a new DHT identity; the barrier and the
    finish count peers by name: its two incarnations are one peer (and the missing one is still missing)."""
    from trainer.strategies.hivemind.coordination import RunCoordinator

    first = RunCoordinator(dht, "rejoin-run", "b", peers=3, poll_interval=0.05)
    first.subkey = "b/killed-incarnation"
    first._store(first.barrier_key, {"peer": "b", "time": time.time()})
    again = RunCoordinator(dht, "rejoin-run", "b", peers=3, poll_interval=0.05)
    a = RunCoordinator(dht, "rejoin-run", "a", peers=3, poll_interval=0.05)
    a._store(a.barrier_key, {"peer": "a", "time": time.time()})
    with pytest.raises(TimeoutError, match="2 of 3 expected peers"):
        again.wait_for_peers(0.5)
    first.announce_done("max_steps", 3)
    a.announce_done("collective_finish", 3)
    c = RunCoordinator(dht, "rejoin-run", "c", peers=3, poll_interval=0.05)
    c.started_with = 3
    assert c.others_done()  # a and b (whichever incarnation) are done
    again.started_with = 3
    assert not again.others_done()  # b's own earlier announcement is not another peer's


@pytest.mark.parametrize(
    ("name", "at_most", "error"),
    [
        ("none", 1.0, 0.0),
        ("fp16", 0.5, 1e-3),
        ("scaled_fp16", 0.5, 1e-3),
        ("uint8", 0.26, 0.1),
        ("quantile8", 0.26, 0.1),
    ],
)
def test_each_compression_sends_fewer_bytes_of_a_gradient_and_comes_back(name, at_most, error):
    """What compression=<name> hands hivemind.Optimizer, measured on the bytes Hivemind serialises for one
    ResNet18-sized block of gradients (the averagers send these parts), and read back as the receiving
    averager reads it (Hivemind 1.1.12's 8-bit quantizations failed to read their own parts
    under NumPy 2.4, so every round of a uint8 run failed; requirements/node.txt pins NumPy below it)."""
    import torch
    from hivemind.compression import deserialize_torch_tensor, serialize_torch_tensor

    from trainer.strategies.hivemind.strategy import compression_options

    gradient = torch.randn(1 << 20)
    options = compression_options(name)
    assert options["grad_compression"] is options["state_averaging_compression"]
    plain = serialize_torch_tensor(gradient).ByteSize()
    part = options["grad_compression"].compress(gradient, info=_info(gradient))
    assert part.ByteSize() <= plain * at_most + 4096, (name, part.ByteSize(), plain)
    received = deserialize_torch_tensor(part)
    assert received.shape == gradient.shape
    # the relative error of what arrives: none exact, float16 to its precision, 8 bits to a few per cent
    assert float((received - gradient).norm() / gradient.norm()) <= error, name


def _info(tensor):
    from hivemind.compression import CompressionInfo

    return CompressionInfo.from_tensor(tensor)


def test_a_joining_peer_waits_for_the_bootstrap_peers_port_instead_of_failing_and_sleeping():
    import socket
    import threading

    from trainer.strategies.hivemind.strategy import _wait_until_listening

    with socket.socket() as probe:  # a free port, not listened on yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"/ip4/127.0.0.1/tcp/{port}/p2p/QmXfw7bXTd3Ab7ERtqgnSBRHb7a4zG8fUX4ArvpGSRbAk6"
    started = time.monotonic()
    assert _wait_until_listening([address], started + 0.5) is False  # nobody listens: the deadline ends it
    assert 0.5 <= time.monotonic() - started < 2

    server = socket.socket()
    opened = threading.Timer(0.4, lambda: (server.bind(("127.0.0.1", port)), server.listen()))
    opened.start()
    try:
        started = time.monotonic()
        assert _wait_until_listening([address], started + 10) is True
        assert 0.4 <= time.monotonic() - started < 1.5  # as soon as it listens, not at the deadline
    finally:
        opened.join()
        server.close()
    # an address the check cannot read is left to the DHT's own attempt
    assert _wait_until_listening(["/dns4/bootstrap/tcp/1/p2p/Qm"], time.monotonic()) is True
