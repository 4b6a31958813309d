"""The hivemind internals the Hivemind strategy relies on, checked against the pinned version.

The round timing (round_timing.py), the instrumented optimizer (optimizer.py) and the strategy read or copy
private parts of hivemind 1.1.12: functions (their source digests), signatures, keywords and attributes.
:func:`check_internals` fails loudly, naming each, when the installed hivemind differs.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

HIVEMIND_VERSION = "1.1.12"


#: Source digests of the hivemind functions whose behaviour the round timing, the optimizer and the strategy
#: rely on or copy. A new hivemind release changes them; then re-read the functions and update the digests.
SOURCE_DIGESTS = {
    "hivemind.averaging.averager.DecentralizedAverager._step": "ad7d195acd6709ea",
    "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group": "0b9ff15fd3fc9676",
    "hivemind.optim.state_averager.TrainingStateAverager._do": "de445bef80f83979",
    "hivemind.optim.state_averager.TrainingStateAverager.step": "3bb85ef8917e9e94",
    "hivemind.optim.optimizer.Optimizer._make_state_averager": "4e2d2b03cefe5998",
    "hivemind.optim.optimizer.Optimizer._update_global_epoch": "0786ab6afe75a7e9",
    "hivemind.optim.optimizer.Optimizer._average_gradients_and_load_into_optimizer": "c0459b56003a2596",
    "hivemind.optim.optimizer.Optimizer.step": "6b146b3259d5d1a8",
    "hivemind.optim.optimizer.Optimizer.load_state_from_peers": "a8b8111272110a54",
    "hivemind.optim.optimizer.Optimizer._should_load_state_from_peers": "b2e4777a62232f54",
    "hivemind.optim.optimizer.Optimizer.shutdown": "96caf836566823f4",
    "hivemind.optim.optimizer.Optimizer._tag_along_with_zero_weight": "771183d83e9de9ef",
}

#: Parameter names (in order) of the internals the instrumentation overrides or calls.
SIGNATURES = {
    "hivemind.averaging.averager.DecentralizedAverager._step": ("self", "step", "future_for_init"),
    "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group": (
        "self",
        "group_info",
        "min_vector_size",
        "kwargs",
    ),
    "hivemind.averaging.averager.DecentralizedAverager.step": (
        "self",
        "gather",
        "scheduled_time",
        "weight",
        "timeout",
        "allow_retries",
        "require_trigger",
        "wait",
    ),
    "hivemind.optim.state_averager.TrainingStateAverager._do": (
        "self",
        "wait_for_trigger",
        "optimizer_step",
        "zero_grad",
        "averaging_round",
        "averaging_control",
        "grad_scaler",
        "set_to_none",
        "timeout",
        "kwargs",
    ),
    "hivemind.optim.optimizer.Optimizer._update_global_epoch": ("self", "grad_scaler"),
    "hivemind.optim.optimizer.Optimizer._average_gradients_and_load_into_optimizer": (
        "self",
        "maybe_step_control",
    ),
    "hivemind.optim.optimizer.Optimizer._make_state_averager": ("self", "kwargs"),
    "hivemind.optim.optimizer.Optimizer.load_state_from_peers": ("self", "kwargs"),
    "hivemind.optim.optimizer.Optimizer._should_load_state_from_peers": ("self",),
}

#: Keyword parameters the strategy passes (the functions take more).
KEYWORDS = {
    "hivemind.optim.optimizer.Optimizer.__init__": (
        "grad_averager_factory",
        "tracker_opts",
        "use_local_updates",
        "matchmaking_time",
        "averaging_timeout",
        "average_state_every",
        "target_batch_size",
        "batch_size_per_step",
        # compression (strategy.py compression_options)
        "grad_compression",
        "state_averaging_compression",
        "load_state_compression",
        # time dilation (trainer/dilation.py)
        "next_chunk_timeout",
        "load_state_timeout",
        "shutdown_timeout",
        "averager_opts",
    ),
    "hivemind.optim.progress_tracker.ProgressTracker.__init__": (
        "default_refresh_period",
        "max_refresh_period",
        "min_refresh_period",
        "metadata_expiration",
    ),
    "hivemind.averaging.averager.DecentralizedAverager.__init__": ("request_timeout", "declare_state_period"),
    "hivemind.dht.node.DHTNode.create": (
        "wait_timeout",
        "bootstrap_timeout",
        "blacklist_time",
        "cache_refresh_before_expiry",
    ),
    "hivemind.dht.dht.DHT.__init__": ("shutdown_timeout",),
    "hivemind.p2p.p2p_daemon.P2P.create": ("idle_timeout", "startup_timeout"),
}

#: Attributes read at run time: (dotted class, attribute names that must exist on the class or its instances).
CLASS_ATTRIBUTES = {
    "hivemind.optim.progress_tracker.GlobalTrainingProgress": ("epoch", "samples_accumulated", "num_peers"),
    "hivemind.averaging.control.StepControl": ("deadline", "triggered", "done", "cancelled", "exception"),
    "hivemind.utils.mpfuture.MPFuture": ("_uid",),
    # an all-reduce's share of results that arrived (see RoundTimingMixin._aggregate_with_group)
    "hivemind.averaging.averager.DecentralizedAverager": ("_running_groups",),
    "hivemind.averaging.allreduce.AllReduceRunner": ("tensor_part_container",),
    "hivemind.averaging.partition.TensorPartContainer": ("failed_size", "total_size"),
}


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ImportError(dotted)


def source_digest(dotted: str) -> str:
    """sha256 (first 16 hex digits) of a function's source, whitespace-normalised."""
    source = inspect.getsource(_resolve(dotted))
    normalised = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


def internals_problems() -> list[str]:
    """Every way the installed hivemind differs from what the instrumentation was written against."""
    import hivemind

    problems: list[str] = []
    if hivemind.__version__ != HIVEMIND_VERSION:
        problems.append(
            f"hivemind=={hivemind.__version__} installed, instrumentation pinned to {HIVEMIND_VERSION}"
        )
    for dotted, expected in SIGNATURES.items():
        try:
            function = _resolve(dotted)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        names = tuple(inspect.signature(function).parameters)
        if names != expected:
            problems.append(f"{dotted} takes {names}, expected {expected}")
    for dotted, names in KEYWORDS.items():
        try:
            accepted = set(inspect.signature(_resolve(dotted)).parameters)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        problems.extend(f"{dotted} no longer takes {name}" for name in names if name not in accepted)
    for dotted in (
        "hivemind.averaging.averager.DecentralizedAverager._step",
        "hivemind.averaging.averager.DecentralizedAverager._aggregate_with_group",
    ):
        try:
            if not inspect.iscoroutinefunction(_resolve(dotted)):
                problems.append(f"{dotted} is no longer a coroutine function")
        except (ImportError, AttributeError):
            pass  # reported above
    for dotted, expected_digest in SOURCE_DIGESTS.items():
        try:
            digest = source_digest(dotted)
        except (ImportError, AttributeError, OSError, TypeError) as exc:
            problems.append(f"cannot read the source of {dotted}: {exc}")
            continue
        if digest != expected_digest:
            problems.append(f"{dotted} changed (source digest {digest}, expected {expected_digest})")
    for dotted, names in CLASS_ATTRIBUTES.items():
        try:
            cls = _resolve(dotted)
        except (ImportError, AttributeError):
            problems.append(f"{dotted} is missing")
            continue
        problems.extend(
            f"{dotted} has no attribute {name}" for name in names if not _has_attribute(cls, name)
        )
    return problems


def _has_attribute(cls: type, name: str) -> bool:
    """A class attribute, a dataclass field, or an instance attribute its source assigns (``self.NAME``)."""
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    try:
        return f"self.{name}" in inspect.getsource(cls)
    except (OSError, TypeError):
        return False


def check_internals() -> None:
    """Raise RuntimeError listing every difference from the hivemind internals the strategy relies on."""
    problems = internals_problems()
    if problems:
        raise RuntimeError(
            "hivemind internals changed; averaging-round timing would be wrong: " + "; ".join(problems)
        )
