"""The grid refuses what the experiment playbook's validation refuses (both take their variables from
experiment/variables.py; tests/controller/test_variables.py)."""

from __future__ import annotations

import pytest

from controller import plan as playbook_rules
from controller.grid.vars import VarError, check_var


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("peers", 0),
        ("batch_size", -1),
        ("max_steps", 1.5),
        ("learning_rate", 0),
        ("learning_rate", float("inf")),
        ("seed", -1),
        ("strategy", "ring"),
        ("model", "vgg"),
        ("dataset", "mnist"),
        ("local_updates", "true"),
        ("data_workers", True),
    ],
)
def test_values_the_playbook_refuses_are_refused(name, value):
    with pytest.raises(VarError):
        check_var(name, value)
    kind = playbook_rules.VARIABLES[name][0]
    if not (kind == "bool" and isinstance(value, str)) and not isinstance(value, bool):
        with pytest.raises(ValueError):
            playbook_rules._parse(name, kind, value)


@pytest.mark.parametrize(
    ("name", "value", "normalised"),
    [
        ("peers", 16, 16),
        ("max_steps", 2500.0, 2500),
        ("learning_rate", 1, 1.0),
        ("local_updates", False, False),
        ("data_workers", 0, 0),
        ("dataset", "fashion-mnist", "fashion-mnist"),
    ],
)
def test_values_the_playbook_accepts_are_accepted(name, value, normalised):
    assert check_var(name, value) == normalised
    kind = playbook_rules.VARIABLES[name][0]
    assert playbook_rules._parse(name, kind, normalised) == normalised
