"""Synchronous data parallelism with torch.distributed (gloo, CPU): ``ddp`` and ``zero``.

One process per VM (the rendezvous, timeouts and collective stop: trainer/strategies/collective.py). Each rank
trains on its own shard of the data (trainer/data.py: ShardSampler), so a step processes ``peers ×
batch_size`` samples, as one Hivemind epoch processes ``target_batch_size``.

- ``ddp``: after backward, the gradients (one flat buffer) are all-reduced and averaged, then every rank
  takes the same optimizer step. This is what ``DistributedDataParallel`` computes, without overlapping the
  all-reduce with backward (the loop owns forward and backward): the all-reduce's whole time is measured, and
  reported as the step's averaging time and as one ``gradients`` row per step in rounds.csv, the same
  meaning Hivemind's averaging time has.
- ``zero``: the same gradient all-reduce, then ``ZeroRedundancyOptimizer`` (ZeRO stage 1): each rank keeps
  the optimizer state of its shard of the parameters only, updates that shard and broadcasts it; the
  broadcast is timed too (a ``parameters`` row; both count as averaging time).

The stop flag travels as one more element of the gradient all-reduce.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from trainer.strategies.base import StepOutcome, build_optimizer, optimizer_spec
from trainer.strategies.collective import CollectiveStrategy


class DataParallelStrategy(CollectiveStrategy):
    """One rank of a ``ddp`` or ``zero`` run (see the module docstring)."""

    def __init__(self, *, sharded: bool) -> None:
        super().__init__()
        self.name = "zero" if sharded else "ddp"
        self.sharded = sharded

    def _after_rendezvous(self) -> None:
        config, model = self._config(), self._model()
        if not self.sharded:
            self.optimizer = build_optimizer(config.optimizer, model.parameters(), config.learning_rate)
            return
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer_class, options = optimizer_spec(config.optimizer, config.learning_rate)
        self.optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=optimizer_class, process_group=self.group, **options
        )

    def step(self, batch_size: int) -> StepOutcome:
        """All-reduce the gradients (with the stop flag), step the optimizer; ZeRO also broadcasts shards."""
        import torch.distributed as dist

        config, optimizer = self._config(), self._ready()
        parameters = [p for p in self._model().parameters() if p.requires_grad]
        # the gradients' exchange, packing into one buffer and back included (as DDP's buckets): averaging,
        # its seconds and CPU apart from computing (the loop paces the rest to the calibration)
        exchange, thread_cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
        # a parameter backward left without a gradient (freed by zero_grad) takes part as zeros
        flat = torch.cat(
            [
                *(torch.zeros(p.numel()) if p.grad is None else p.grad.reshape(-1) for p in parameters),
                torch.tensor([float(self._wants_stop())]),
            ]
        )
        started = time.perf_counter()
        dist.all_reduce(flat, group=self.group)
        allreduce = time.perf_counter() - started
        flat[:-1] /= config.peers
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            averaged = flat[offset : offset + size].view_as(parameter)
            if parameter.grad is None:
                parameter.grad = averaged.clone()
            else:
                parameter.grad.copy_(averaged)
            offset += size
        exchange = time.perf_counter() - exchange
        thread_cpu, process_cpu = time.thread_time() - thread_cpu, time.process_time() - process_cpu
        self._stop_agreed = self._stop_agreed or bool(flat[-1] > 0)
        self._report("gradients", allreduce)
        broadcast = 0.0
        if self.sharded:
            optimizer._local_step()
            started, thread_at, process_at = time.perf_counter(), time.thread_time(), time.process_time()
            optimizer._sync_params()
            broadcast = time.perf_counter() - started
            thread_cpu += time.thread_time() - thread_at
            process_cpu += time.process_time() - process_at
            self._report("parameters", broadcast)
        else:
            optimizer.step()
        self._steps += 1
        return StepOutcome(
            averaging_seconds=exchange + broadcast,
            peers=config.peers,
            averaging_thread_cpu_seconds=thread_cpu,
            averaging_process_cpu_seconds=process_cpu,
        )

    def local_optimizer(self) -> Any:
        """The optimizer whose state this process holds (ZeRO: the one of its shard)."""
        return self.optimizer.optim if self.sharded and self.optimizer is not None else self.optimizer
