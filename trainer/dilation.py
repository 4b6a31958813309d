"""Time dilation: a peer whose CPU is D times slower than the machine it models waits D times as long.

On the local cluster a peer's container gets a D-th of the cores of the VM it stands for. Slowing only the
CPU distorts the model: a round that takes 1 s of Hivemind's 60 s averaging timeout on the VMs takes D s of
the same 60 s here, and Hivemind's polling and retries compete D times as often for the small CPU. So every
duration is made D times longer too, the way time-dilated network emulation does it (Gupta et al., NSDI
2006): the slow cluster then behaves like the fast one in slow motion, and measured times divided by D are
the modelled machine's (docs/time-dilation.md).

The time settings a user gives (``matchmaking_time``, ``averaging_timeout``, ``finish_grace``) keep
meaning the modelled machine's seconds; ``dilated(config)`` turns them into the seconds this peer waits.
Hivemind's own timers that its public arguments reach are scaled from their defaults in the installed
Hivemind (read from its signatures, not restated here), and one module constant is patched. What cannot be
scaled (the Go daemon p2pd's fixed timeouts) is listed in the docs. ``start_timeout`` stays in real seconds:
it bounds the testbed's start-up, not the modelled run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

#: RunConfig fields in the modelled machine's seconds
MODELLED_SECONDS = ("matchmaking_time", "averaging_timeout", "finish_grace", "next_chunk_timeout")


def check_factor(factor: float) -> str | None:
    """What is wrong with a dilation factor (None: it is one, finite and >= 1; 1: no dilation): the one check
    the trainer's settings and ``trainer dht`` share."""
    if not (isinstance(factor, int | float) and math.isfinite(factor) and factor >= 1):
        return "must be a factor >= 1 (1: no dilation)"
    return None


@dataclasses.dataclass(frozen=True)
class Dilation:
    """This peer's D, read once from its settings: every wait the trainer itself makes (a strategy's polling,
    a heartbeat, a bounded wait) goes through ``seconds``; Hivemind's own timers through the functions below.

    >>> Dilation(4.0).seconds(2.5)
    10.0
    >>> Dilation(0.5)
    Traceback (most recent call last):
    ...
    ValueError: time_dilation must be a factor >= 1 (1: no dilation) (got 0.5)
    """

    factor: float = 1.0

    def __post_init__(self) -> None:
        problem = check_factor(self.factor)
        if problem:
            raise ValueError(f"time_dilation {problem} (got {self.factor!r})")

    @classmethod
    def of(cls, config: Any) -> Dilation:
        return cls(float(config.time_dilation))

    def seconds(self, modelled: float) -> float:
        """``modelled`` seconds of the machine the run models, in this peer's seconds."""
        return modelled * self.factor


def dilated(config: Any) -> Any:
    """``config`` (a RunConfig) with its modelled durations turned into this peer's seconds."""
    factor = config.time_dilation
    if factor == 1:
        return config
    given = {name: getattr(config, name) for name in MODELLED_SECONDS}
    return dataclasses.replace(
        config, **{name: value * factor for name, value in given.items() if value is not None}
    )


def _default(function: Callable[..., Any], name: str) -> float:
    return float(inspect.signature(function).parameters[name].default)


def dht_options(factor: float) -> dict[str, float]:
    """``hivemind.DHT`` keyword arguments: every RPC's wait, the blacklist, the cache refresh, shutdown,
    the p2p daemon's idle and start-up timeouts: each its Hivemind default times ``factor`` (none at 1)."""
    if factor == 1:
        return {}
    from hivemind.dht.dht import DHT
    from hivemind.dht.node import DHTNode
    from hivemind.p2p import P2P

    node = DHTNode.create
    wait = _default(node, "wait_timeout") * factor
    return {
        "wait_timeout": wait,
        "bootstrap_timeout": wait,  # Hivemind's default: the wait_timeout
        "blacklist_time": _default(node, "blacklist_time") * factor,
        "cache_refresh_before_expiry": _default(node, "cache_refresh_before_expiry") * factor,
        "shutdown_timeout": _default(DHT.__init__, "shutdown_timeout") * factor,
        "idle_timeout": _default(P2P.create, "idle_timeout") * factor,
        "startup_timeout": _default(P2P.create, "startup_timeout") * factor,
    }


def optimizer_options(
    factor: float, matchmaking_time: float, next_chunk_timeout: float | None = None
) -> dict[str, Any]:
    """``hivemind.Optimizer`` keyword arguments beyond matchmaking_time and averaging_timeout (already dilated
    in the config): chunk, state-download and shutdown timeouts, and the state averager's leader wait and
    DHT declaration period (none at 1 but a chunk timeout given). ``matchmaking_time`` and
    ``next_chunk_timeout`` (None: Hivemind's default, the matchmaking time): the dilated ones.

    >>> optimizer_options(1, 0.5), optimizer_options(1, 0.5, 5.0)
    ({}, {'next_chunk_timeout': 5.0})
    """
    if factor == 1:
        return {} if next_chunk_timeout is None else {"next_chunk_timeout": next_chunk_timeout}
    from hivemind.averaging.averager import DecentralizedAverager
    from hivemind.optim.optimizer import Optimizer

    return {
        # Hivemind's default: the matchmaking time
        "next_chunk_timeout": matchmaking_time if next_chunk_timeout is None else next_chunk_timeout,
        "load_state_timeout": _default(Optimizer.__init__, "load_state_timeout") * factor,
        "shutdown_timeout": _default(Optimizer.__init__, "shutdown_timeout") * factor,
        "averager_opts": averager_options(factor, DecentralizedAverager),
    }


def averager_options(factor: float, averager: type | None = None) -> dict[str, float]:
    """An averager's wait for its group leader and the period of its DHT declaration, times ``factor``."""
    if averager is None:
        from hivemind.averaging.averager import DecentralizedAverager as averager
    return {
        "request_timeout": _default(averager.__init__, "request_timeout") * factor,
        "declare_state_period": _default(averager.__init__, "declare_state_period") * factor,
    }


def gradient_averager(averager_class: type, factor: float) -> Callable[..., Any] | type:
    """The gradient averager factory: Hivemind hands the Optimizer's averager_opts to the state averager
    only, so the gradient averager gets the same dilated options bound here (none at 1)."""
    if factor == 1:
        return averager_class
    return functools.partial(averager_class, **averager_options(factor))


def tracker_metadata_expiration(factor: float) -> dict[str, float]:
    """The progress tracker's record lifetime (re-reported every half of it), times ``factor`` (none at 1)."""
    if factor == 1:
        return {}
    from hivemind.optim.progress_tracker import ProgressTracker

    return {"metadata_expiration": _default(ProgressTracker.__init__, "metadata_expiration") * factor}


def patch_module_constants(factor: float) -> dict[str, float]:
    """Scale the one timer Hivemind keeps as a module constant: the leader queue's safety margin in
    matchmaking (read at call time; the averagers fork after this). Returns what it set."""
    from hivemind.averaging import matchmaking
    from hivemind.utils import timed_storage

    value = timed_storage.MAX_DHT_TIME_DISCREPANCY_SECONDS * factor
    matchmaking.MAX_DHT_TIME_DISCREPANCY_SECONDS = value
    return {"MAX_DHT_TIME_DISCREPANCY_SECONDS": value}
