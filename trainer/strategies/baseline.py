"""Single-node training: a plain torch optimizer, no averaging, no barrier."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from trainer.strategies.base import StepOutcome, build_optimizer

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.strategies.base import RoundSink

log = logging.getLogger(__name__)


class BaselineStrategy:
    """The regular single-node run the study compares Hivemind against.

    >>> strategy = BaselineStrategy()
    >>> strategy.wait_for_start()
    0.0
    """

    name = "baseline"
    finishes_collectively = False

    def __init__(self) -> None:
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self._steps = 0

    def setup(self, model: torch.nn.Module, config: RunConfig, on_round: RoundSink) -> None:
        self.model = model
        self.optimizer = build_optimizer(config.optimizer, model.parameters(), config.learning_rate)

    def wait_for_start(self) -> float:
        return 0.0

    def training_module(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("BaselineStrategy.setup(model, config, on_round) must be called first")
        return self.model

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _ready(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("BaselineStrategy.setup(model, config, on_round) must be called first")
        return self.optimizer

    def zero_grad(self) -> None:
        self._ready().zero_grad(set_to_none=True)

    def step(self, batch_size: int) -> StepOutcome:
        self._ready().step()
        self._steps += 1
        return StepOutcome()

    def request_stop(self, reason: str) -> None:
        """Not called for the baseline (it does not finish collectively): the loop stops at once."""

    def stop_reason(self) -> str | None:
        return None

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        return self.optimizer

    def process_roles(self) -> dict[int, str]:
        return {}

    def finish(self, exit_reason: str) -> None:
        log.debug("baseline finished after %d steps (%s)", self._steps, exit_reason)
