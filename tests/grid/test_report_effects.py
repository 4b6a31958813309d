"""The effects table matches runs that differ in a factor alone, and in the schedule the grid derives from it
(steps, evaluations), on the samples of the experiment."""

from __future__ import annotations

from pathlib import Path

from controller.report.data import Experiment
from controller.report.effects import effect_cell, samples_per_experiment


def experiment(**settings) -> Experiment:
    base = {"strategy": "hivemind", "batch_size": 32, "target_batch_size": 1250, "local_updates": False}
    return Experiment("x", Path("x"), {**base, **settings}, True)


def test_peers_levels_share_a_cell_when_the_samples_are_equal():
    """2 x 8 peers of 480 steps and 4 x 4 of 240 train the same 30,720 samples: one cell for the peers
    factor, whatever the steps and evaluations; with other samples, another cell."""
    two = experiment(peers=2, vcpus=8, max_steps=480, eval_every=60)
    four = experiment(peers=4, vcpus=4, max_steps=240, eval_every=30)
    assert samples_per_experiment(two) == samples_per_experiment(four) == 30720
    assert effect_cell(two, "peers") == effect_cell(four, "peers")
    more = experiment(peers=4, vcpus=4, max_steps=480, eval_every=30)
    assert effect_cell(two, "peers") != effect_cell(more, "peers")


def test_a_factor_other_than_the_one_measured_still_separates_cells():
    """Runs that differ in the learning rate too are not in one cell of the peers factor."""
    two = experiment(peers=2, vcpus=8, max_steps=480, learning_rate=0.01)
    four = experiment(peers=4, vcpus=4, max_steps=240, learning_rate=0.1)
    assert effect_cell(two, "peers") != effect_cell(four, "peers")


def test_batch_size_levels_of_a_baseline_share_a_cell_only_on_equal_samples():
    small = experiment(strategy="baseline", peers=1, vcpus=16, batch_size=32, max_steps=960, eval_every=120)
    large = experiment(strategy="baseline", peers=1, vcpus=16, batch_size=128, max_steps=240, eval_every=30)
    assert effect_cell(small, "batch_size") == effect_cell(large, "batch_size")
    short = experiment(strategy="baseline", peers=1, vcpus=16, batch_size=128, max_steps=234, eval_every=30)
    assert effect_cell(small, "batch_size") != effect_cell(short, "batch_size")
