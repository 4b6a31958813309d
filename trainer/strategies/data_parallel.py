"""Synchronous data parallelism with torch.distributed (gloo, CPU): ``ddp`` and ``zero``.

One process per VM; rank 0 hosts the rendezvous (``--rendezvous HOST:PORT``, ``--rank``, ``--expected-peers``
is the world size). Each rank trains on its own shard of the data (trainer/data.py: DistributedSampler), so a
step processes ``peers × batch_size`` samples, as one Hivemind epoch processes ``target_batch_size``.

- ``ddp``: after backward, the gradients (one flat buffer) are all-reduced and averaged, then every rank
  takes the same optimizer step. This is what ``DistributedDataParallel`` computes, without overlapping the
  all-reduce with backward (the loop owns forward and backward): the all-reduce's whole time is measured, and
  reported as the step's averaging time and as one ``gradients`` row per step in rounds.csv, the same
  meaning Hivemind's averaging time has.
- ``zero``: the same gradient all-reduce, then ``ZeroRedundancyOptimizer`` (ZeRO stage 1): each rank keeps
  the optimizer state of its shard of the parameters only, updates that shard and broadcasts it; the
  broadcast is timed too (a ``parameters`` row; both count as averaging time).

The start barrier is the rendezvous (bounded by ``--start-timeout``); every collective after it is bounded by
``--averaging-timeout``: a rank that died makes the others fail their next step within it (exit reason
``error``, results kept). There is no elastic restart. The run stops collectively: a flag travels with every
gradient all-reduce, so all ranks stop at the same step (at max steps, or one step after the first rank
reached the target loss).
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import TYPE_CHECKING, Any

import torch

from experiment.results import RoundRecord
from trainer.dilation import dilated
from trainer.strategies.base import StepOutcome
from trainer.strategies.baseline import build_optimizer, optimizer_spec, parameters_fingerprint

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.strategies.base import RoundSink

log = logging.getLogger(__name__)


class DataParallelStrategy:
    """One rank of a synchronous data-parallel run (see the module docstring)."""

    finishes_collectively = True

    def __init__(self, *, sharded: bool) -> None:
        self.name = "zero" if sharded else "ddp"
        self.sharded = sharded
        self.config: RunConfig | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: Any = None
        self.group: Any = None
        self._on_round: RoundSink | None = None
        self._steps = 0
        self._own_reason: str | None = None
        self._stop_agreed = False
        self._stop_reason: str | None = None
        self._details: dict[str, Any] = {}

    # ------------------------------------------------------------------ setup and start

    def setup(self, model: torch.nn.Module, config: RunConfig, on_round: RoundSink) -> None:
        self.model, self.config, self._on_round = model, config, on_round
        self._details.update(rank=config.rank, world_size=config.expected_peers, rendezvous=config.rendezvous)

    def wait_for_start(self) -> float:
        """The rendezvous at rank 0 (the start barrier), then the same initial parameters on every rank."""
        import torch.distributed as dist

        config, model = self._config(), self._model()
        started = time.monotonic()
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://{config.rendezvous}",
                rank=config.rank,
                world_size=config.expected_peers,
                timeout=datetime.timedelta(seconds=config.start_timeout),
            )
        except (RuntimeError, ValueError) as exc:  # the store's connect timeout, refused rendezvous
            raise TimeoutError(
                f"rendezvous at {config.rendezvous} did not complete within {config.start_timeout:g}s "
                f"(rank {config.rank} of {config.expected_peers}): {str(exc).splitlines()[0]}"
            ) from exc
        # every collective from here on gives up after averaging_timeout (a dead rank ends the run), in this
        # peer's seconds (trainer/dilation.py)
        ranks = list(range(config.expected_peers))
        timeout = datetime.timedelta(seconds=dilated(config).averaging_timeout)
        self.group = dist.new_group(ranks, timeout=timeout)
        with torch.no_grad():
            for parameter in model.parameters():
                dist.broadcast(parameter.data, src=0, group=self.group)
        self.optimizer = self._build_optimizer()
        dist.barrier(group=self.group)
        waited = time.monotonic() - started
        log.info(
            "rendezvous complete: rank %d of %d after %.1f s", config.rank, config.expected_peers, waited
        )
        return waited

    def _build_optimizer(self) -> Any:
        config, model = self._config(), self._model()
        if not self.sharded:
            return build_optimizer(config.optimizer, model.parameters(), config.learning_rate)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer_class, options = optimizer_spec(config.optimizer, config.learning_rate)
        return ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=optimizer_class, process_group=self.group, **options
        )

    # ------------------------------------------------------------------ steps

    def zero_grad(self) -> None:
        self._ready().zero_grad(set_to_none=False)

    def step(self, batch_size: int) -> StepOutcome:
        """All-reduce the gradients (with the stop flag), step the optimizer; ZeRO also broadcasts shards."""
        import torch.distributed as dist

        config, optimizer = self._config(), self._ready()
        parameters = [p for p in self._model().parameters() if p.requires_grad]
        wants_stop = self._own_reason is not None or self._steps + 1 >= config.max_steps
        flat = torch.cat([*(p.grad.reshape(-1) for p in parameters), torch.tensor([float(wants_stop)])])
        started = time.perf_counter()
        dist.all_reduce(flat, group=self.group)
        allreduce = time.perf_counter() - started
        flat[:-1] /= config.expected_peers
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            parameter.grad.copy_(flat[offset : offset + size].view_as(parameter.grad))
            offset += size
        self._stop_agreed = self._stop_agreed or bool(flat[-1] > 0)
        self._report("gradients", allreduce)
        broadcast = 0.0
        if self.sharded:
            optimizer._local_step()
            started = time.perf_counter()
            optimizer._sync_params()
            broadcast = time.perf_counter() - started
            self._report("parameters", broadcast)
        else:
            optimizer.step()
        self._steps += 1
        return StepOutcome(averaging_seconds=allreduce + broadcast, peers=config.expected_peers)

    def _report(self, kind: str, seconds: float) -> None:
        if self._on_round is None:
            return
        self._on_round(
            RoundRecord(
                timestamp=time.time(),
                epoch=self._steps,
                kind=kind,
                outcome="ok",
                group_size=self._config().expected_peers,
                matchmaking_seconds=0.0,
                allreduce_seconds=seconds,
                blocking_seconds=seconds,
                received_share=1.0,  # a collective of every rank: it returns all of the result or fails
            )
        )

    # ------------------------------------------------------------------ the collective finish

    def request_stop(self, reason: str) -> None:
        if self._own_reason is None:
            self._own_reason = reason

    def stop_reason(self) -> str | None:
        if self._stop_reason is None and self._stop_agreed:
            self._stop_reason = self._own_reason or "collective_finish"
        return self._stop_reason

    def finish(self, exit_reason: str) -> None:
        import torch.distributed as dist

        if self.optimizer is not None:
            self._details.update(parameters_fingerprint(self._model()))
        if dist.is_initialized():
            # after an error another rank may never come: no barrier, just leave
            dist.destroy_process_group()
        self._details["exit_reason"] = exit_reason

    def summary_details(self) -> dict[str, Any]:
        return dict(self._details)

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer whose state this process holds (ZeRO: the one of its shard)."""
        return self.optimizer.optim if self.sharded and self.optimizer is not None else self.optimizer

    def process_roles(self) -> dict[int, str]:
        return {}

    # ------------------------------------------------------------------ helpers

    def _config(self) -> RunConfig:
        if self.config is None:
            raise RuntimeError(f"{self.name}: setup(model, config, on_round) must be called first")
        return self.config

    def _model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError(f"{self.name}: setup(model, config, on_round) must be called first")
        return self.model

    def _ready(self) -> Any:
        if self.optimizer is None:
            raise RuntimeError(f"{self.name}: wait_for_start() must complete first")
        return self.optimizer
