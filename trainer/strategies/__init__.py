"""Strategies: what differs between single-node and collaborative training (see ``base.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from experiment.variables import DATA_PARALLEL_STRATEGIES

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy

STRATEGY_NAMES = ("baseline", "hivemind", *DATA_PARALLEL_STRATEGIES)


def get_strategy(name: str) -> Strategy:
    """A new strategy object by name; each is imported only when asked for (importing hivemind or deepspeed
    takes seconds)."""
    if name == "baseline":
        from trainer.strategies.baseline import BaselineStrategy

        return BaselineStrategy()
    if name == "hivemind":
        from trainer.strategies.hivemind.strategy import HivemindStrategy

        return HivemindStrategy()
    if name in ("ddp", "zero"):
        from trainer.strategies.data_parallel import DataParallelStrategy

        return DataParallelStrategy(sharded=name == "zero")
    if name == "fsdp":
        from trainer.strategies.fsdp import FsdpStrategy

        return FsdpStrategy()
    if name == "deepspeed":
        from trainer.strategies.deepspeed_zero import DeepSpeedStrategy

        return DeepSpeedStrategy()
    if name == "diloco":
        from trainer.strategies.diloco import DiLoCoStrategy

        return DiLoCoStrategy()
    raise ValueError(f"unknown strategy {name!r}, choose from {', '.join(STRATEGY_NAMES)}")
