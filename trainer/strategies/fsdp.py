"""Fully sharded data parallelism (``fsdp``): PyTorch's ``fully_shard`` (FSDP2, ZeRO stage 3) over gloo.

One rank per host, with the rendezvous, timeouts and collective stop of every torch.distributed strategy
(trainer/strategies/collective.py). Parameters, gradients and optimizer state are all sharded: each rank
holds 1/world of each. Forward all-gathers a unit's parameters before it runs (and frees them after),
backward gathers them again and reduce-scatters the gradients, so each rank's optimizer steps its own shard.

Units: every direct child of the model that holds parameters and has sub-modules (ResNet18: ``layer1`` ..
``layer4``) is one FSDP unit, and the root is the last (the stem and the head).

The collectives are timed: FSDP is given an all-gather and a reduce-scatter of its own
(``set_custom_all_gather`` / ``set_custom_reduce_scatter``) that run each collective to completion and add
its seconds to the step. So nothing overlaps computation (as in ``ddp``, whose all-reduce follows
backward). A step's averaging time is its all-gathers (rounds.csv ``parameters``) plus its reduce-scatters
and the stop flag (``gradients``); the loop takes the part spent inside forward and backward out of their
compute time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

# the interface of FSDP's custom collectives (documented at set_custom_all_gather, not re-exported)
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from trainer import memory
from trainer.strategies.base import StepOutcome, build_optimizer, parameters_fingerprint
from trainer.strategies.collective import AGREED_EXITS, CollectiveStrategy


class CollectiveClock:
    """Seconds spent in FSDP's all-gathers and reduce-scatters since :meth:`reset`."""

    def __init__(self) -> None:
        self.gather_seconds = 0.0
        self.scatter_seconds = 0.0

    def reset(self) -> None:
        self.gather_seconds = self.scatter_seconds = 0.0


class _Allocate:
    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


class TimedAllGather(_Allocate, AllGather):
    """FSDP's all-gather, run to completion and timed."""

    def __init__(self, clock: CollectiveClock) -> None:
        self.clock = clock

    def __call__(self, output_tensor, input_tensor, group, async_op=False) -> None:  # noqa: ANN001
        import torch.distributed as dist

        started = time.perf_counter()
        dist.all_gather_single(output_tensor, input_tensor, group=group)
        self.clock.gather_seconds += time.perf_counter() - started


class TimedReduceScatter(_Allocate, ReduceScatter):
    """FSDP's reduce-scatter, run to completion and timed."""

    def __init__(self, clock: CollectiveClock) -> None:
        self.clock = clock

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False) -> None:  # noqa: ANN001
        import torch.distributed as dist

        started = time.perf_counter()
        dist.reduce_scatter_single(output=output_tensor, input=input_tensor, group=group, op=op)
        self.clock.scatter_seconds += time.perf_counter() - started


def shard_units(model: torch.nn.Module) -> list[str]:
    """The direct children that become FSDP units of their own (the rest stays with the root).

    >>> from trainer.models import build_model
    >>> shard_units(build_model("resnet18", seed=0))
    ['layer1', 'layer2', 'layer3', 'layer4']
    """
    return [
        name
        for name, child in model.named_children()
        if any(True for _ in child.children()) and any(True for _ in child.parameters())
    ]


class FsdpStrategy(CollectiveStrategy):
    """One rank of an ``fsdp`` run (see the module docstring)."""

    name = "fsdp"

    def __init__(self) -> None:
        super().__init__()
        self.clock = CollectiveClock()
        self.units: list[Any] = []  # the FSDP modules, the root last

    def _after_rendezvous(self) -> None:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        config, model = self._config(), self._model()
        mesh = DeviceMesh.from_group(self.group, "cpu")
        units = [getattr(model, name) for name in shard_units(model)]
        for unit in units:
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.units = [*units, model]
        for unit in self.units:
            unit.set_custom_all_gather(TimedAllGather(self.clock))
            unit.set_custom_reduce_scatter(TimedReduceScatter(self.clock))
        self._details["fsdp_units"] = [*shard_units(model), "root"]
        self.optimizer = build_optimizer(config.optimizer, model.parameters(), config.learning_rate)

    def zero_grad(self) -> None:
        super().zero_grad()
        self.clock.reset()  # a step's collectives start here (an evaluation's gathers are not its)

    def step(self, batch_size: int) -> StepOutcome:
        """Step this rank's shard; agree on stopping; report the step's collectives."""
        self._ready().step()
        in_compute = self.clock.gather_seconds + self.clock.scatter_seconds
        flag = self._agree_on_stop()
        self._report("parameters", self.clock.gather_seconds)
        self._report("gradients", self.clock.scatter_seconds + flag)
        self._steps += 1
        return StepOutcome(
            averaging_seconds=in_compute + flag,
            peers=self._config().peers,
            averaging_in_compute_seconds=in_compute,
        )

    def _resharded(self) -> torch.nn.Module:
        """The model with every unit sharded: a forward without backward (an evaluation) leaves the root
        unit's parameters gathered (FSDP keeps the root unsharded after forward)."""
        for unit in self.units:
            unit.reshard()
        return self._model()

    def held_bytes(self) -> dict[str, int]:
        """The parameters and gradients this rank holds: its shards."""
        return memory.model_bytes(self._resharded())

    def _fingerprint(self, exit_reason: str) -> dict[str, Any]:
        """The full parameters, gathered from the shards (every rank, after an agreed exit only)."""
        if exit_reason not in AGREED_EXITS:
            return {}
        self._resharded()
        full = torch.nn.Module()
        tensors = [p.full_tensor() for p in self._model().parameters()]
        full.values = torch.nn.ParameterList(torch.nn.Parameter(t, requires_grad=False) for t in tensors)
        return parameters_fingerprint(full)
