"""Strategies: what differs between single-node and collaborative training (see ``base.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy

STRATEGY_NAMES = ("baseline", "hivemind", "ddp", "zero")


def get_strategy(name: str) -> Strategy:
    """A new strategy object by name; ``hivemind`` is imported only when asked for (importing it takes
    seconds)."""
    if name == "baseline":
        from trainer.strategies.baseline import BaselineStrategy

        return BaselineStrategy()
    if name == "hivemind":
        from trainer.strategies.hivemind import HivemindStrategy

        return HivemindStrategy()
    if name in ("ddp", "zero"):
        from trainer.strategies.data_parallel import DataParallelStrategy

        return DataParallelStrategy(sharded=name == "zero")
    raise ValueError(f"unknown strategy {name!r}, choose from {', '.join(STRATEGY_NAMES)}")
