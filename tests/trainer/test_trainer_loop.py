"""The shared loop: stop rules, measured fields, the collective-finish hand-over (stand-in strategies)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from experiment.results import ResultsWriter, read_evals, read_steps
from trainer.data import SyntheticImages
from trainer.loop import LoopLimits, TrainingLoop
from trainer.shutdown import StopSignals
from trainer.stats import RunStats
from trainer.strategies.base import StepOutcome
from trainer.strategies.baseline import BaselineStrategy


class CollectiveStandIn(BaselineStrategy):
    """Finishes collectively: stops ``overshoot`` steps after the loop asked it to."""

    finishes_collectively = True

    def __init__(self, overshoot: int) -> None:
        super().__init__()
        self.overshoot = overshoot
        self.requests: list[str] = []
        self.remaining: int | None = None

    def request_stop(self, reason: str) -> None:
        self.requests.append(reason)
        self.remaining = self.overshoot

    def step(self, batch_size: int) -> StepOutcome:
        super().step(batch_size)
        if self.remaining is not None:
            self.remaining -= 1
        return StepOutcome(
            averaging_seconds=0.0, hivemind_epoch=self._steps // 4, peers=2, collective_samples=0
        )

    def stop_reason(self) -> str | None:
        return self.requests[0] if self.remaining is not None and self.remaining < 0 else None


class SignalledStandIn(BaselineStrategy):
    def __init__(self, signals: StopSignals, at_step: int) -> None:
        super().__init__()
        self.signals, self.at_step = signals, at_step

    def step(self, batch_size: int) -> StepOutcome:
        outcome = super().step(batch_size)
        if self._steps == self.at_step:
            self.signals.requested = True
        return outcome


def make_loop(strategy, tmp_path, *, max_steps=6, target=None, eval_every=0, signals=None):
    from trainer.config import RunConfig

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    strategy.setup(model, RunConfig(learning_rate=0.01), on_round=lambda record: None)
    loader = DataLoader(SyntheticImages(size=64, seed=0), batch_size=8, shuffle=True, drop_last=True)
    writer = ResultsWriter(tmp_path, write_evals=eval_every > 0)
    loop = TrainingLoop(
        model=model,
        strategy=strategy,
        train_loader=loader,
        val_loader=loader,
        limits=LoopLimits(max_steps=max_steps, eval_every=eval_every, eval_batches=1),
        stats=RunStats(target_loss=target),
        writer=writer,
        signals=signals,
    )
    return loop, writer


def test_stops_at_max_steps_and_records_every_step(tmp_path) -> None:
    loop, writer = make_loop(BaselineStrategy(), tmp_path, max_steps=20, eval_every=5)
    assert loop.run() == "max_steps"  # 20 steps span 2.5 passes over the 8-batch loader
    writer.close()
    rows = read_steps(tmp_path)
    assert [row["step"] for row in rows] == list(range(1, 21))
    for row in rows:
        assert row["samples"] == 8 and row["peers"] == 1 and row["averaging_seconds"] == 0.0
        parts = row["data_seconds"] + row["compute_seconds"] + row["optimizer_seconds"]
        assert 0 < parts <= row["step_seconds"] + 1e-6
        assert row["compute_seconds"] > 0
    walls = [row["wall_seconds"] for row in rows]
    assert walls == sorted(walls) and walls[0] > 0
    assert [row["step"] for row in read_evals(tmp_path)] == [5, 10, 15, 20]


def test_target_loss_ends_the_run(tmp_path) -> None:
    loop, writer = make_loop(BaselineStrategy(), tmp_path, max_steps=50, target=100.0)
    assert loop.run() == "target_loss"
    assert loop.step == 1 and loop.stats.time_to_target_loss_seconds > 0


@pytest.mark.parametrize("own_reason", ["max_steps", "target_loss"])
def test_collective_strategy_decides_when_to_stop(tmp_path, own_reason) -> None:
    strategy = CollectiveStandIn(overshoot=3)
    target = 100.0 if own_reason == "target_loss" else None
    loop, writer = make_loop(strategy, tmp_path, max_steps=5, target=target)
    assert loop.run() == own_reason
    assert strategy.requests == [own_reason]  # asked exactly once
    assert loop.step == (5 if own_reason == "max_steps" else 1) + 4  # trained on until the strategy said stop


def test_signal_stops_after_the_current_step(tmp_path) -> None:
    signals = StopSignals()
    loop, writer = make_loop(SignalledStandIn(signals, at_step=3), tmp_path, max_steps=50, signals=signals)
    assert loop.run() == "signal"
    assert loop.step == 3


def test_stop_signals_modes() -> None:
    """Training: flag only; a second signal or an interrupting phase raises; a shielded shutdown only logs."""
    import os
    import signal

    from trainer.shutdown import StopRequested

    before = signal.getsignal(signal.SIGTERM)
    signals = StopSignals().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.requested and signals.signal_name == "SIGTERM"
        with pytest.raises(StopRequested):
            os.kill(os.getpid(), signal.SIGINT)
        signals.shielded = True
        os.kill(os.getpid(), signal.SIGTERM)  # ignored while shutting down
        signals.shielded, signals.requested, signals.interrupting = False, False, True
        with pytest.raises(StopRequested):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) == before


class _FakeMeter:
    """A container's CPU as the pacing reads it: the training thread's own CPU time, and others' on top."""

    def __init__(self, others_share: float = 0.0) -> None:
        import time

        self.others_share, self.clock = others_share, time.thread_time

    def usage_seconds(self) -> float:
        return self.clock() * (1 + self.others_share)


def test_paced_steps_take_the_plans_time_and_the_validation_is_left_out_of_the_clock(tmp_path) -> None:
    """A paced loop (trainer/loop.py Pace) stretches each settled step without averaging to what the plan's
    CPU speed and quota give it, the wait inside compute_seconds and apart as paced_seconds; a validation
    pass's time is in evals.csv and counted in later steps' validation_seconds."""
    from trainer.loop import Pace

    loop, writer = make_loop(BaselineStrategy(), tmp_path, max_steps=12, eval_every=6)
    # a plan far slower than this machine: 100 samples per CPU second at 0.5 of a core (quota 0.6 = 1.2 x 0.5)
    loop.pace, loop.meter = Pace(rate=100.0, headroom=0.2, quota=0.6), _FakeMeter()
    assert loop.run() == "max_steps"
    writer.close()
    steps, evals = read_steps(tmp_path), read_evals(tmp_path)
    settled = [row for row in steps if row["step"] > 2]
    plan = 8 / (
        100.0 * 0.5
    )  # a batch of 8 at the planned rate and quota: 0.16 s (the step itself: about 1 ms)
    assert all(row["paced_seconds"] == 0.0 and row["target_seconds"] is None for row in steps[:2])
    assert (
        sum(row["paced_seconds"] > 0 for row in settled) >= len(settled) - 2
    )  # a step preempted may run over
    assert all(row["target_seconds"] == pytest.approx(plan, rel=0.05) for row in settled)
    took = sum(row["compute_seconds"] + row["optimizer_seconds"] for row in settled)
    # never faster than the plan; slower only where this machine held a step back beyond what was made up
    assert plan * len(settled) * 0.98 <= took <= plan * len(settled) * 1.25
    received = loop.stats.compute_received()
    assert 0.8 <= received["target_seconds"] / received["seconds"] <= 1.02
    # the pass after step 6 is validation, recorded and left out of the clock from step 7 on
    (first, second) = evals
    assert first["step"] == 6 and first["eval_seconds"] > 0
    assert steps[6]["validation_seconds"] == pytest.approx(first["eval_seconds"])
    assert steps[5]["validation_seconds"] == 0.0


class CollectiveApartStandIn(BaselineStrategy):
    """Averages in every step as DDP does, apart from computing: a spin of ``collective`` seconds after the
    backward, its seconds and CPU reported."""

    def __init__(self, collective: float) -> None:
        super().__init__()
        self.collective = collective

    def step(self, batch_size: int) -> StepOutcome:
        import time

        started, thread_cpu = time.perf_counter(), time.thread_time()
        while time.perf_counter() - started < self.collective:
            pass
        seconds, thread_cpu = time.perf_counter() - started, time.thread_time() - thread_cpu
        super().step(batch_size)
        # the spin is this thread's alone: the process's CPU in it is the thread's (as the meter below counts)
        return StepOutcome(
            averaging_seconds=seconds,
            peers=2,
            averaging_thread_cpu_seconds=thread_cpu,
            averaging_process_cpu_seconds=thread_cpu,
        )


def test_steps_that_average_apart_from_computing_are_paced_outside_their_collectives(tmp_path) -> None:
    """DDP's and ZeRO's steps all average, between the backward and the optimizer: the loop paces the rest
    of each step to the plan and leaves the collective's seconds and CPU out of it and of cpu_seconds."""
    from trainer.loop import Pace

    loop, writer = make_loop(CollectiveApartStandIn(collective=0.03), tmp_path, max_steps=12)
    loop.pace, loop.meter = Pace(rate=100.0, headroom=0.2, quota=0.6), _FakeMeter()
    assert loop.run() == "max_steps"
    writer.close()
    settled = [row for row in read_steps(tmp_path) if row["step"] > 2]
    plan = 8 / (100.0 * 0.5)
    assert all(row["averaging_seconds"] >= 0.03 for row in settled)
    targets = [row["target_seconds"] for row in settled]
    assert all(target == pytest.approx(plan, rel=0.05) for target in targets)
    assert sum(row["paced_seconds"] > 0 for row in settled) >= len(settled) - 2
    computing = sum(
        row["compute_seconds"] + row["optimizer_seconds"] - row["averaging_seconds"] for row in settled
    )
    assert plan * len(settled) * 0.98 <= computing <= sum(targets) * 1.25
    # the spin's CPU is the collective's, not the step's: what is left is far below it
    assert all(row["cpu_seconds"] < 0.03 for row in settled)
    received = loop.stats.compute_received()
    assert received["every_step_averages"] and 0.8 <= received["target_seconds"] / received["seconds"] <= 1.02
