"""The contract between the training loop and a strategy.

The loop (trainer/loop.py) owns data loading, forward and backward, timing, telemetry and results; a
strategy owns only what differs between single-node and collaborative training: the optimizer step (with any
averaging), the module forward runs through and how backward starts, the start barrier, the collective stop
condition and shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from experiment.results import RoundRecord
    from trainer.config import RunConfig


@dataclass(frozen=True)
class StepOutcome:
    """What a strategy reports about one optimizer step.

    :param averaging_seconds: part of the step's optimizer time spent blocked in matchmaking, all-reduce or
        state averaging (0.0 for the baseline)
    :param hivemind_epoch: the collective epoch after this step (0 for the baseline)
    :param peers: live peers the strategy knows of, itself included (1 for the baseline)
    :param collective_samples: samples accumulated towards the target batch size (0 for the baseline)
    :param averaging_in_compute_seconds: the part of ``averaging_seconds`` spent in collectives during the
        step's forward and backward (FSDP's parameter all-gathers and gradient reduce-scatters, DeepSpeed's
        reductions); the loop moves it from the step's compute time to its optimizer time, so compute is
        computation only and the breakdown's parts still sum to the step
    :param averaging_thread_cpu_seconds: the training thread's CPU seconds in the step's collectives, where
        the strategy runs them apart from computing (DDP's and ZeRO's all-reduce and broadcast, between the
        backward and the optimizer); None where they are not apart (Hivemind's rounds overlap the steps)
    :param averaging_process_cpu_seconds: the same for the whole process, its communication threads too
    """

    averaging_seconds: float = 0.0
    hivemind_epoch: int = 0
    peers: int = 1
    collective_samples: int = 0
    averaging_in_compute_seconds: float = 0.0
    averaging_thread_cpu_seconds: float | None = None
    averaging_process_cpu_seconds: float | None = None


class RoundSink(Protocol):
    """Where a strategy reports each averaging round (the loop fans it out to rounds.csv and the exporter)."""

    def __call__(self, record: RoundRecord) -> None: ...


class Strategy(Protocol):
    name: str
    #: True when the strategy decides when the run ends (Hivemind's coordinated finish). The loop then does
    #: not stop on its own conditions (max_steps, target_loss): it calls request_stop(reason) once when one
    #: first holds and keeps stepping until stop_reason() returns a reason (the strategy bounds the overshoot,
    #: e.g. to the next epoch boundary). False (baseline): the loop stops at once; request_stop is not called.
    finishes_collectively: bool

    def setup(self, model: torch.nn.Module, config: RunConfig, on_round: RoundSink) -> None:
        """Build the optimizer (and for Hivemind the DHT); raise ValueError/ConnectionError on bad peers."""

    def wait_for_start(self) -> float:
        """Block until the run may start (start barrier); return the seconds waited. Raise TimeoutError."""

    def training_module(self) -> torch.nn.Module:
        """The module the loop calls forward on, once the start barrier passed: the model itself, or what the
        strategy wrapped it in (DeepSpeed's engine)."""

    def backward(self, loss: torch.Tensor) -> None:
        """Backward from the loss (``loss.backward()``; DeepSpeed: its engine's backward)."""

    def zero_grad(self) -> None: ...

    def step(self, batch_size: int) -> StepOutcome:
        """Apply the optimizer after backward, averaging as the strategy requires."""

    def request_stop(self, reason: str) -> None:
        """The loop's own stop condition `reason` holds (only called when finishes_collectively)."""

    def stop_reason(self) -> str | None:
        """A reason to stop now, or None to keep going: 'collective_finish' (another peer ended the run), or
        the reason given to request_stop once the collective stop it asked for is reached; the loop records it
        as the exit reason."""

    def local_optimizer(self) -> torch.optim.Optimizer | None:
        """The torch optimizer whose state this process keeps (for the memory profile), or None."""

    def process_roles(self) -> dict[int, str]:
        """The processes the strategy started beside the training loop's, by pid, with the role each plays
        (summary.json's ``cpu_received.process_tree_by_role``); {} where it starts none."""

    def finish(self, exit_reason: str) -> None:
        """Leave cleanly: serve averaging for a bounded grace period if others still need us, then shut
        down."""


# The optimizer helpers every strategy shares (torch imported when called: this module is the contract)
def optimizer_spec(name: str, learning_rate: float) -> tuple[type[torch.optim.Optimizer], dict[str, float]]:
    """The class and options of ``sgd`` (momentum 0.9) or ``adam``, the optimizers the study compares."""
    import torch

    if name == "sgd":
        return torch.optim.SGD, {"lr": learning_rate, "momentum": 0.9}
    if name == "adam":
        return torch.optim.Adam, {"lr": learning_rate}
    raise ValueError(f"unknown optimizer {name!r}, choose from sgd, adam")


def build_optimizer(name: str, parameters, learning_rate: float) -> torch.optim.Optimizer:
    """Every strategy's local optimizer (``optimizer_spec``)."""
    optimizer_class, options = optimizer_spec(name, learning_rate)
    return optimizer_class(parameters, **options)


def parameters_fingerprint(model: torch.nn.Module, samples: int = 32) -> dict[str, Any]:
    """The final parameters in summary.json, to compare peers: sha256 of all, ``samples`` evenly spaced values
    and the norm."""
    import hashlib

    import torch

    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
    indices = torch.linspace(0, flat.numel() - 1, samples).long()
    return {
        "final_params_sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
        "final_params_sample": [float(v) for v in flat[indices]],
        "final_params_norm": float(flat.norm()),
    }
