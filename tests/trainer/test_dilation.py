"""Time dilation in the trainer (trainer/dilation.py): every duration D times longer, through arguments the
installed Hivemind accepts (docs/time-dilation.md)."""

from __future__ import annotations

import inspect

import pytest

from trainer import dilation
from trainer.config import ConfigError, RunConfig


def _parameters(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def test_the_modelled_seconds_become_this_peers():
    config = RunConfig(strategy="hivemind", matchmaking_time=3, averaging_timeout=60, finish_grace=30)
    assert dilation.dilated(config) is config  # D = 1: nothing changes
    slowed = dilation.dilated(RunConfig(**{**vars(config), "time_dilation": 4.0}))
    assert (slowed.matchmaking_time, slowed.averaging_timeout, slowed.finish_grace) == (12, 240, 120)
    assert slowed.start_timeout == config.start_timeout  # the testbed's start-up stays in real seconds
    assert slowed.next_chunk_timeout is None  # unset: Hivemind's default (the dilated matchmaking time)
    chunked = dilation.dilated(RunConfig(**{**vars(config), "time_dilation": 4.0, "next_chunk_timeout": 5.0}))
    assert chunked.next_chunk_timeout == 20


def test_a_factor_below_one_is_refused():
    with pytest.raises(ConfigError, match="time_dilation"):
        RunConfig(strategy="hivemind", time_dilation=0.5).validate()


def test_hivemind_gets_its_own_defaults_times_the_factor_through_arguments_it_accepts():
    from hivemind.averaging import matchmaking
    from hivemind.averaging.averager import DecentralizedAverager
    from hivemind.dht.dht import DHT
    from hivemind.dht.node import DHTNode
    from hivemind.optim.optimizer import Optimizer
    from hivemind.p2p import P2P

    assert dilation.dht_options(1) == {} and dilation.optimizer_options(1, 5.0) == {}
    dht = dilation.dht_options(4)
    default_wait = inspect.signature(DHTNode.create).parameters["wait_timeout"].default
    assert dht["wait_timeout"] == 4 * default_wait
    assert set(dht) <= _parameters(DHTNode.create) | _parameters(DHT.__init__) | _parameters(P2P.create)

    options = dilation.optimizer_options(4, 12.0)
    assert set(options) <= _parameters(Optimizer.__init__) and options["next_chunk_timeout"] == 12.0
    # a chunk timeout of its own (dilated by the config) instead of Hivemind's default, the matchmaking time
    assert dilation.optimizer_options(4, 2.0, 20.0)["next_chunk_timeout"] == 20.0
    averager = options["averager_opts"]
    assert set(averager) <= _parameters(DecentralizedAverager.__init__)
    assert (
        averager["request_timeout"]
        == 4 * inspect.signature(DecentralizedAverager.__init__).parameters["request_timeout"].default
    )

    factory = dilation.gradient_averager(DecentralizedAverager, 4)
    assert factory.keywords == averager and dilation.gradient_averager(DecentralizedAverager, 1) is (
        DecentralizedAverager
    )

    original = matchmaking.MAX_DHT_TIME_DISCREPANCY_SECONDS
    try:
        assert dilation.patch_module_constants(4) == {"MAX_DHT_TIME_DISCREPANCY_SECONDS": 4 * original}
        assert 4 * original == matchmaking.MAX_DHT_TIME_DISCREPANCY_SECONDS
    finally:
        matchmaking.MAX_DHT_TIME_DISCREPANCY_SECONDS = original
