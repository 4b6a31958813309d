"""SIGTERM/SIGINT handling: stop after the current step, or at once while waiting at the start barrier."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(Exception):
    """Raised in the main thread when a stop signal must interrupt what it is doing (barrier wait, second
    signal)."""


class StopSignals:
    """Turns SIGTERM/SIGINT into a stop request the training loop checks between steps.

    While :attr:`interrupting` is set (preparing, strategy setup, waiting at the start barrier), a signal
    raises :class:`StopRequested` at once; during training it only sets :attr:`requested`, and a second
    signal raises. While :attr:`shielded` is set (the strategy's bounded shutdown of DHT, p2pd and
    averagers, then the summary), signals are only logged, so the shutdown that prevents orphan processes
    is never cut short.

    A process forked from the trainer (Hivemind's DHT and averagers) inherits the handler. There a signal
    is left to the trainer while it runs, which ends those processes in order; once the trainer is gone,
    the signal ends the process. A stop sent to the whole process group or control group (Ctrl-C in a
    terminal, ``kill -- -PGID``, systemd stopping the unit) would otherwise raise in them and break them
    mid-call, and the trainer's shutdown would wait out its grace periods: 20-60 s instead of seconds.

    >>> signals = StopSignals()
    >>> signals.requested
    False
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None
        self.interrupting = False
        self.shielded = False
        self._previous: dict[int, object] = {}
        self._pid = os.getpid()

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._pid = os.getpid()
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:
            if _alive(self._pid):
                return
            os._exit(128 + number)  # the trainer is gone: nobody is left to end this process
        already = self.requested
        self.requested = True
        self.signal_name = signal.Signals(number).name
        if self.shielded:
            log.info("%s received while shutting down: finishing the shutdown first", self.signal_name)
            return
        if self.interrupting or already:
            raise StopRequested(self.signal_name)
        log.info("%s received: stopping after the current step", self.signal_name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
