"""The machine a measurement was taken on: what a calibration or a probe records beside its figures, and
what a later run compares to decide whether the figures still hold (controller/plan.py)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

#: the keys of ``measured_on`` that decide whether a measurement still holds on this machine
IDENTITY_KEYS = ("cores", "cpu_model", "torch")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cores() -> int:
    """The cores this process may run on (its affinity where the system has one, else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def this_machine() -> dict[str, Any]:
    """This machine's cores (those this process may run on), CPU model, torch version (read from the
    installed package's metadata: no torch import) and operating system (``platform.system()``)."""
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = ""
    return {"cores": cores(), "cpu_model": cpu_model(), "torch": torch, "system": platform.system()}


def changed(measured_on: dict[str, Any], machine: dict[str, Any]) -> list[str]:
    """What differs between the machine a measurement was taken on and ``machine``: "key: then -> now".

    >>> now = {"cores": 2, "cpu_model": "A", "torch": "2.2"}
    >>> changed({"cores": 2, "cpu_model": "A", "torch": "2.1"}, now)
    ['torch: 2.1 -> 2.2']
    >>> changed({"cores": 2, "torch": "2.2+cpu"}, now)
    []
    """
    return [
        f"{key}: {measured_on[key]} -> {machine[key]}"
        for key in IDENTITY_KEYS
        if key in measured_on and key in machine and _public(measured_on[key]) != _public(machine[key])
    ]


def _public(value: Any) -> str:
    """A value without a version's local part: torch.__version__ 2.14.1+cu130 is the package 2.14.1."""
    return str(value).split("+", 1)[0]
