"""Memory of the trainer process: resident set size per step and at its peak, and the bytes the model's
parameters, their gradients and the optimizer's state take (strategies compared by memory).

``summary.json`` → ``memory``: ``peak_rss_bytes`` (the kernel's high-water mark of the process), ``rss_bytes``
(at the end of the loop), ``parameter_bytes``, ``gradient_bytes``, ``optimizer_state_bytes`` (what this
process's optimizer keeps: all of it for baseline/ddp/hivemind, its shard for zero, fsdp and deepspeed; the
parameters and gradients of this process: fsdp's shards, DeepSpeed's as its strategy counts them). steps.csv
has ``rss_bytes`` per step; the exporter's ``trainer_memory_bytes{kind}`` gauge the same kinds.
"""

from __future__ import annotations

import os
import resource
from typing import Any

import torch

MEMORY_KINDS = ("rss", "parameters", "gradients", "optimizer_state")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """The process's resident set size now (``/proc/self/statm``).

    >>> rss_bytes() > 1 << 20
    True
    """
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE_SIZE


def peak_rss_bytes() -> int:
    """The largest resident set size the process had so far (``getrusage``; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def tensor_bytes(tensors: Any) -> int:
    """Bytes of the tensors this process holds: of a sharded tensor (FSDP's DTensor) its local shard."""
    local = (t.to_local() if hasattr(t, "to_local") else t for t in tensors if isinstance(t, torch.Tensor))
    return sum(t.numel() * t.element_size() for t in local)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors an optimizer keeps per parameter (momentum, Adam's moments).

    >>> model = torch.nn.Linear(10, 10)
    >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> model(torch.ones(1, 10)).sum().backward(); sgd.step()
    >>> optimizer_state_bytes(sgd)  # one momentum buffer per parameter: (100 + 10) float32
    440
    """
    return sum(tensor_bytes(state.values()) for state in optimizer.state.values())


def model_bytes(model: torch.nn.Module) -> dict[str, int]:
    """``parameters`` and ``gradients`` (the gradients that exist now) in bytes."""
    parameters = list(model.parameters())
    return {
        "parameters": tensor_bytes(parameters),
        "gradients": tensor_bytes(p.grad for p in parameters if p.grad is not None),
    }
