"""trainer/shutdown.py's stop signals in a process forked from the trainer (as Hivemind's DHT and averagers
are): a stop sent to the whole process group leaves them to the trainer while it runs, and ends them once
it is gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from trainer.shutdown import StopSignals


def _sleep_forever() -> None:
    """A forked child's body: exit 3 if a signal raised in it (as the trainer's handler used to)."""
    try:
        while True:
            time.sleep(0.02)
    except BaseException:  # noqa: BLE001
        os._exit(3)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_forked_child_leaves_the_stop_to_the_running_trainer() -> None:
    signals = StopSignals().install()
    signals.interrupting = True  # as during the strategy's set-up, when Hivemind forks its processes
    try:
        child = os.fork()
        if child == 0:
            _sleep_forever()
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        time.sleep(0.5)
        done, _ = os.waitpid(child, os.WNOHANG)
        assert done == 0, "the child stopped (or raised) while the trainer runs"
        assert not signals.requested  # the child's signal is not the trainer's stop request
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    finally:
        signals.restore()


def test_once_the_trainer_is_gone_the_signal_ends_its_child() -> None:
    reader, writer = os.pipe()
    trainer = os.fork()
    if trainer == 0:  # a stand-in trainer: installs the handler, forks its child, hands its pid over, exits
        StopSignals().install()
        child = os.fork()
        if child == 0:
            _sleep_forever()
        os.write(writer, str(child).encode())
        os._exit(0)
    os.close(writer)
    child = int(os.read(reader, 32))
    os.close(reader)
    assert os.waitpid(trainer, 0)[1] == 0
    assert _running(child)
    os.kill(child, signal.SIGTERM)
    try:
        assert _wait_until(lambda: not _running(child), 5.0), "the orphaned child outlived SIGTERM"
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)
