"""DeepSpeed ZeRO stages 1-3 (``deepspeed``, ``--zero-stage``), the library itself, on CPU over gloo.

One rank per host, with the rendezvous, timeouts and collective stop of every torch.distributed strategy
(trainer/strategies/collective.py): the process group is torch's, which DeepSpeed adopts
(``deepspeed.init_distributed``), with ``averaging_timeout`` as every later collective's timeout. The
DeepSpeed config is generated from the run's settings (:func:`deepspeed_config`): the micro batch is
``batch_size``, the optimizer and learning rate are the run's, ZeRO's stage is ``zero_stage`` (default 2):

- stage 1: each rank keeps the optimizer state of its partition of the parameters;
- stage 2: and only its partition of the reduced gradients;
- stage 3: and only its partition of the parameters, gathered for forward and backward.

The engine owns forward (it gathers stage-3 parameters), backward (gradient reduction) and the step
(partition update, parameter all-gather). ``overlap_comm`` is off, so every collective blocks and
DeepSpeed's own communication logger times it: the step's collectives during backward are averaging time
inside compute (rounds.csv ``gradients``, with the stop flag), those during forward and the step are
``parameters``. The shared-memory all-reduce DeepSpeed can build for ranks on one host (inference only, and
compiled with the host's C++ compiler on first use) is switched off: every rank here has a host of its own.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from experiment.variables import DEFAULT_ZERO_STAGE
from trainer.memory import tensor_bytes
from trainer.strategies.base import StepOutcome, optimizer_spec, parameters_fingerprint
from trainer.strategies.collective import AGREED_EXITS, CollectiveStrategy


def deepspeed_config(
    *, batch_size: int, optimizer: str, learning_rate: float, zero_stage: int
) -> dict[str, Any]:
    """DeepSpeed's config for one rank of a run.

    >>> config = deepspeed_config(batch_size=32, optimizer="adam", learning_rate=0.001, zero_stage=3)
    >>> config["train_micro_batch_size_per_gpu"], config["optimizer"], config["zero_optimization"]["stage"]
    (32, {'type': 'Adam', 'params': {'lr': 0.001, 'torch_adam': True, 'adam_w_mode': False}}, 3)
    """
    optimizer_class, options = optimizer_spec(optimizer, learning_rate)  # the other strategies' optimizer
    if optimizer_class is torch.optim.Adam:
        # torch.optim.Adam itself (DeepSpeed's "Adam" is otherwise its own AdamW)
        options = {**options, "torch_adam": True, "adam_w_mode": False}
    spec = {"type": optimizer_class.__name__, "params": options}
    return {
        "train_micro_batch_size_per_gpu": batch_size,
        "gradient_accumulation_steps": 1,
        "optimizer": spec,
        "zero_optimization": {"stage": zero_stage, "overlap_comm": False},
        "gradient_clipping": 0.0,  # none, as in every other strategy (set: DeepSpeed's default clips)
        # ZeRO is tested by DeepSpeed with its Adam variants only; torch's SGD works the same way in it
        "zero_allow_untested_optimizer": True,
        # times every collective (blocking: overlap_comm is off); read and reset every step
        "comms_logger": {"enabled": True, "prof_all": True, "verbose": False, "debug": False},
        "steps_per_print": 2**31 - 1,
    }


class DeepSpeedStrategy(CollectiveStrategy):
    """One rank of a ``deepspeed`` run (see the module docstring)."""

    name = "deepspeed"

    def __init__(self) -> None:
        super().__init__()
        self.engine: Any = None
        self._comms: Any = None
        self._forward_seconds = 0.0
        self._backward_seconds = 0.0
        self._gradient_bytes = 0

    def setup(self, model: torch.nn.Module, config: Any, on_round: Any) -> None:
        super().setup(model, config, on_round)
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        try:
            import deepspeed  # noqa: F401  (seconds to import: here, before the start barrier)
        except ImportError as exc:
            raise ValueError(f"strategy deepspeed needs the deepspeed package: {exc}") from exc
        self._details["zero_stage"] = self.zero_stage

    @property
    def zero_stage(self) -> int:
        stage = self._config().zero_stage
        return DEFAULT_ZERO_STAGE if stage is None else stage

    def _after_rendezvous(self) -> None:
        import deepspeed
        import deepspeed.ops
        import torch.distributed as dist
        from deepspeed.comm import comm as deepspeed_comm

        config, model = self._config(), self._model()
        host, _, port = config.rendezvous.rpartition(":")
        # what DeepSpeed reads about the job; torch's process group already exists and is adopted
        os.environ.update(
            RANK=str(config.rank),
            WORLD_SIZE=str(config.peers),
            LOCAL_RANK="0",
            LOCAL_SIZE="1",
            MASTER_ADDR=host,
            MASTER_PORT=port,
        )
        dist.set_timeout(self.collective_timeout())  # DeepSpeed's collectives run on the default group
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # see the module docstring
        deepspeed.init_distributed(dist_backend="gloo")
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=deepspeed_config(
                batch_size=config.batch_size,
                optimizer=config.optimizer,
                learning_rate=config.learning_rate,
                zero_stage=self.zero_stage,
            ),
        )
        self._comms = deepspeed_comm
        self._comms_seconds()  # the collectives of initialisation are not a step's

    def _comms_seconds(self) -> float:
        """Seconds DeepSpeed's collectives took since the last call: its communication logger's timers (one
        per operation, accumulating), read and reset; the logger's own records are cleared (they would grow
        with every step)."""
        milliseconds = sum(timer.elapsed(reset=True) for timer in self._comms.timers.get_timers().values())
        self._comms.comms_logger.comms_dict.clear()
        return milliseconds / 1000

    def training_module(self) -> torch.nn.Module:
        if self.engine is None:
            raise RuntimeError("deepspeed: wait_for_start() must complete first")
        return self.engine

    def zero_grad(self) -> None:
        """The engine zeroes the gradients after its step; here only the step's collectives start."""
        self._comms_seconds()  # an evaluation's stage-3 gathers are not the step's

    def backward(self, loss: torch.Tensor) -> None:
        self._forward_seconds = self._comms_seconds()
        self.engine.backward(loss)
        self._backward_seconds = self._comms_seconds()
        self._gradient_bytes = self._held_gradient_bytes()

    def step(self, batch_size: int) -> StepOutcome:
        """The engine's step (partition update and parameter gathering); agree on stopping."""
        self.engine.step()
        in_step = self._comms_seconds()
        flag = self._agree_on_stop()
        self._report("gradients", self._backward_seconds + flag)
        self._report("parameters", self._forward_seconds + in_step)
        self._steps += 1
        in_compute = self._forward_seconds + self._backward_seconds
        return StepOutcome(
            averaging_seconds=in_compute + in_step + flag,
            peers=self._config().peers,
            averaging_in_compute_seconds=in_compute,
        )

    # ------------------------------------------------------------------ memory and the final parameters

    def _held_gradient_bytes(self) -> int:
        """Gradients this rank holds after backward: those left on the model's parameters and the reduced
        partition ZeRO keeps for the step (``averaged_gradients``, every stage)."""
        reduced = getattr(self.optimizer, "averaged_gradients", {})
        groups = reduced.values() if isinstance(reduced, dict) else reduced
        flat = [tensor for group in groups for tensor in (group or [])]
        return tensor_bytes(p.grad for p in self._model().parameters()) + tensor_bytes(flat)

    def held_bytes(self) -> dict[str, int]:
        """Parameters this rank holds (the model's own storage, empty for stage-3 partitioned ones, their
        stage-3 partitions, and the optimizer's fp32 partition copies), and gradients as after the last
        backward."""
        parameters = list(self._model().parameters())
        inner = getattr(self.optimizer, "optimizer", None)
        copies = [p for group in getattr(inner, "param_groups", []) for p in group["params"]]
        shared = {p.data_ptr() for p in parameters}
        return {
            "parameters": tensor_bytes(p.data for p in parameters)
            + tensor_bytes(p.ds_tensor for p in parameters if hasattr(p, "ds_tensor"))
            + tensor_bytes(p for p in copies if p.data_ptr() not in shared),
            "gradients": self._gradient_bytes,
        }

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        """The torch optimizer inside DeepSpeed's ZeRO optimizer: the state of this rank's partition."""
        return getattr(self.optimizer, "optimizer", self.optimizer)

    def _fingerprint(self, exit_reason: str) -> dict[str, Any]:
        """The full parameters (stage 3 gathers them: every rank, after an agreed exit only)."""
        if exit_reason not in AGREED_EXITS:
            return {}
        if self.zero_stage < 3:
            return parameters_fingerprint(self._model())
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self._model().parameters())):
            return parameters_fingerprint(self._model())
