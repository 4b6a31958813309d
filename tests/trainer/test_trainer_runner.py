"""RunSession in-process with stand-in strategies: barrier timeout, bad peers, crashes, the barrier clock."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import trainer.runner as runner
from experiment.results import is_complete, read_config, read_steps, read_summary
from trainer.config import RunConfig
from trainer.strategies.baseline import BaselineStrategy


class WaitingStandIn(BaselineStrategy):
    """Waits ``wait`` seconds at the barrier; raises ``error`` from wait_for_start or step when given."""

    def __init__(self, *, wait: float = 0.0, barrier_error=None, step_error=None, setup_error=None) -> None:
        super().__init__()
        self.wait, self.barrier_error, self.step_error, self.setup_error = (
            wait,
            barrier_error,
            step_error,
            setup_error,
        )
        self.finished_with: str | None = None

    def setup(self, model, config, on_round) -> None:
        if self.setup_error is not None:
            raise self.setup_error
        super().setup(model, config, on_round)

    def wait_for_start(self) -> float:
        time.sleep(self.wait)
        if self.barrier_error is not None:
            raise self.barrier_error
        return self.wait

    def step(self, batch_size: int):
        if self.step_error is not None and self._steps == 2:
            raise self.step_error
        return super().step(batch_size)

    def finish(self, exit_reason: str) -> None:
        self.finished_with = exit_reason

    def summary_details(self) -> dict:
        return {"finished_with": self.finished_with}


def run_with(monkeypatch, tmp_path, strategy, **settings):
    monkeypatch.setattr(runner, "get_strategy", lambda name: strategy)
    config = RunConfig(
        model="smallcnn", batch_size=8, max_steps=5, results_dir=str(tmp_path), metrics_port=-1, peer_id="p1",
        **settings,
    ).validate()  # fmt: skip
    return runner.run(config)


def test_barrier_wait_is_recorded_and_not_training_time(monkeypatch, tmp_path) -> None:
    strategy = WaitingStandIn(wait=1.0)
    assert run_with(monkeypatch, tmp_path, strategy) == 0
    summary = read_summary(tmp_path)
    assert summary["start_wait_seconds"] == 1.0 and summary["exit_reason"] == "max_steps"
    assert summary["barrier_release_timestamp"] >= summary["start_timestamp"] + 1.0
    assert summary["wall_seconds"] == pytest.approx(
        summary["end_timestamp"] - summary["barrier_release_timestamp"]
    )
    steps = read_steps(tmp_path)
    assert steps[0]["wall_seconds"] < 5.0  # counted from the release, not from process start
    for row in steps:
        assert row["timestamp"] - summary["barrier_release_timestamp"] == pytest.approx(
            row["wall_seconds"], abs=1e-3
        )
    assert summary["strategy_details"] == {"finished_with": "max_steps"} and summary["exit_detail"] is None


def test_a_start_removes_what_ended_trainers_left_in_shared_memory(monkeypatch, tmp_path) -> None:
    """Hivemind's shared tensors are files in /dev/shm that killed processes leave; a trainer
    removes, as it starts, those of processes that no longer run, and says so in its summary."""
    from trainer import shm

    monkeypatch.setattr(shm, "SHM", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    (tmp_path / "shm" / "torch_999999999_7_3").write_bytes(b"x" * 1000)  # no such process
    live = tmp_path / "shm" / f"torch_{os.getpid()}_7_4"
    live.write_bytes(b"y")
    results = tmp_path / "results"
    assert run_with(monkeypatch, results, WaitingStandIn(wait=0.0)) == 0
    assert sorted(path.name for path in (tmp_path / "shm").iterdir()) == [live.name]
    assert read_summary(results)["stale_shm_removed"] == {"files": 1, "bytes": 1000}


def test_start_timeout_exits_3_and_says_why(monkeypatch, tmp_path, capsys) -> None:
    strategy = WaitingStandIn(wait=0.2, barrier_error=TimeoutError("only 1 of 3 peers arrived within 0.2 s"))
    assert run_with(monkeypatch, tmp_path, strategy) == 3
    summary = read_summary(tmp_path)
    assert (
        summary["exit_reason"] == "start_timeout" and summary["complete"] is False and summary["steps"] == 0
    )
    assert summary["exit_detail"] == "only 1 of 3 peers arrived within 0.2 s"
    assert summary["start_wait_seconds"] >= 0.2 and summary["barrier_release_timestamp"] is None
    assert strategy.finished_with == "start_timeout"
    assert capsys.readouterr().err.strip() == "trainer: error: only 1 of 3 peers arrived within 0.2 s"
    assert read_steps(tmp_path) == [] and read_config(tmp_path)["peer_id"] == "p1"


def test_unreachable_peer_at_setup_exits_2(monkeypatch, tmp_path, capsys) -> None:
    strategy = WaitingStandIn(
        setup_error=ConnectionError("cannot reach initial peer /ip4/10.0.0.9/tcp/1/p2p/Qm")
    )
    assert run_with(monkeypatch, tmp_path, strategy) == 2
    assert capsys.readouterr().err.startswith("trainer: error: cannot reach initial peer")
    assert strategy.finished_with == "error" and not is_complete(tmp_path)


def test_crash_mid_run_exits_1_with_summary(monkeypatch, tmp_path) -> None:
    strategy = WaitingStandIn(step_error=RuntimeError("boom"))
    assert run_with(monkeypatch, tmp_path, strategy) == 1
    summary = read_summary(tmp_path)
    assert summary["exit_reason"] == "error" and summary["exit_detail"] == "RuntimeError: boom"
    assert summary["steps"] == 2 and strategy.finished_with == "error"


# the trainer command's end (trainer/cli.py): os._exit once the run is over (no interpreter teardown)
END_PROCESS = """
import logging, multiprocessing, sys, time
from trainer.cli import _end_process

logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
child.start()
print(child.pid)
logging.info("run ended: the last line")
sys.stdout.write("unflushed")
_end_process(3)
"""


def test_the_trainer_process_ends_with_its_exit_code_its_logs_flushed_and_no_child_left(tmp_path) -> None:
    log = tmp_path / "trainer.log"
    ended = subprocess.run(
        [sys.executable, "-c", END_PROCESS, str(log)], capture_output=True, text=True, timeout=60, check=False
    )
    assert ended.returncode == 3, ended.stderr
    child_pid, rest = ended.stdout.split("\n", 1)
    assert rest == "unflushed"
    assert log.read_text().strip().endswith("run ended: the last line")
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child_pid}") and time.monotonic() < deadline:  # reaped by init
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{child_pid}"), "the child process outlived the trainer"
