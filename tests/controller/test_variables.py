"""The experiment's variables are defined once (experiment/variables.py) and every user derives from it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from experiment import variables, variables_table
from trainer.config import RunConfig

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "controller" / "plan.py"
GRID_VARS = REPO / "controller" / "grid" / "vars.py"
NAMES = REPO / "controller" / "names.py"
TABLE = REPO / "experiment" / "variables_table.py"
INVENTORY = {
    "peers": ["peer-01", "peer-02"],
    "local": True,
    "host_cores": 2,
    "hostvars": {host: {"cluster_address": "10.0.0.1", "memory_mb": 2048} for host in ("peer-01", "peer-02")},
}


def _fresh(path: Path, name: str) -> types.ModuleType:
    """``path`` imported anew (under ``name``), with whatever experiment.variables is in sys.modules now."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_table_is_generated_from_the_definition():
    text = variables_table.DOCS.read_text()
    regenerate = ".venv/bin/python -m experiment.variables_table --write-docs"
    stale = f"docs/architecture.md's table is stale: run {regenerate}"
    assert variables_table.docs_with_table(text) == text, stale


def test_every_setting_handed_to_the_trainer_is_a_trainer_flag():
    fields = {field.name for field in dataclasses.fields(RunConfig)}
    handed = {
        *variables.TRAINER_FIELDS,
        *variables.HIVEMIND_FIELDS,
        *variables.DATA_PARALLEL_FIELDS,
        *variables.DEEPSPEED_FIELDS,
    }
    assert handed <= fields, handed - fields
    # and the trainer accepts exactly the values the playbook does
    for name in ("strategy", "model", "dataset", "optimizer", "preprocessing"):
        assert isinstance(variables.BY_NAME[name].kind, tuple), name


def test_names_are_unique_and_kinds_known():
    assert len(variables.BY_NAME) == len(variables.VARIABLES)
    for variable in variables.VARIABLES:
        kinds = ("int", "int0", "float", "float0", "bool", "str", "dilation")
        assert isinstance(variable.kind, tuple) or variable.kind in kinds, variable
        assert variable.meaning and set(variable.trainers) <= {
            "all",
            "hivemind",
            "data_parallel",
            "deepspeed",
            "diloco",
        }


def test_a_variable_added_to_the_definition_reaches_every_user(monkeypatch):
    """One new entry (here a Hivemind `warmup_steps`) and nothing else: the playbook's validation checks it
    and hands it to Hivemind peers, the grid accepts and checks it, the typo check knows it, and the docs
    table is stale until regenerated."""
    source = Path(variables.__file__).read_text()
    entry = 'Variable("warmup_steps", "int", 4, "steps before the first averaging", (HIVEMIND,))'
    added = source.replace("\nBY_NAME", f"\nVARIABLES = (*VARIABLES, {entry})\nBY_NAME", 1)
    assert added != source
    definition = types.ModuleType("experiment.variables")
    definition.__file__ = variables.__file__
    exec(compile(added, variables.__file__, "exec"), definition.__dict__)  # noqa: S102 - our own source

    before = _fresh(NAMES, "names_before_warmup_steps")
    monkeypatch.setitem(sys.modules, "experiment.variables", definition)

    playbook = _fresh(PLAN, "plan_with_warmup_steps")
    assert "warmup_steps" in playbook.testbed_variable_names()
    refused = playbook.testbed_experiment({"peers": "2", "warmup_steps": "0"}, INVENTORY)
    assert "warmup_steps must be >= 1 (got 0)" in refused["errors"]
    planned = playbook.testbed_experiment({"peers": "2", "warmup_steps": "6"}, INVENTORY)
    assert planned["errors"] == [] and planned["settings"]["warmup_steps"] == 6
    assert planned["trainer_settings"]["warmup_steps"] == 6
    assert playbook.testbed_experiment({"peers": "2"}, INVENTORY)["settings"]["warmup_steps"] == 4

    grid = _fresh(GRID_VARS, "grid_vars_with_warmup_steps")
    assert grid.check_var("warmup_steps", 3) == 3
    with pytest.raises(grid.VarError):
        grid.check_var("warmup_steps", 0)
    assert "warmup_steps" in grid.PLAYBOOK_VARS

    (refused_name,) = before.testbed_unknown_variables(["warmup_steps"])
    assert refused_name.startswith("unknown variable 'warmup_steps'")
    assert _fresh(NAMES, "names_with_warmup_steps").testbed_unknown_variables(["warmup_steps"]) == []

    table = _fresh(TABLE, "table_with_warmup_steps")
    docs = variables_table.DOCS.read_text()
    assert "`warmup_steps`" in table.docs_with_table(docs) and "`warmup_steps`" not in docs
