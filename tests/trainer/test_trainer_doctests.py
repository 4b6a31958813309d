"""The ``>>>`` examples in the trainer's docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "trainer.config",
    "trainer.stats",
    "trainer.loop",
    "experiment.results",
    "trainer.telemetry",
    "trainer.models",
    "trainer.data",
    "trainer.shutdown",
    "trainer.strategies.baseline",
    "trainer.strategies.hivemind.strategy",
    "trainer.cpu_usage",
    "trainer.imagefolder",
    "trainer.cpuprobe",
    "trainer.calibrate",
    "trainer.netcounters",
    "trainer.traffic",
    "trainer.shm",
    "trainer.strategies.hivemind.internals",
    "trainer.strategies.hivemind.round_timing",
    "trainer.strategies.hivemind.optimizer",
    "trainer.memory",
    "trainer.strategies.fsdp",
    "trainer.strategies.deepspeed_zero",
    "trainer.strategies.diloco",
    "controller.grid.spec",
    "benchmarks.strategy_memory",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
