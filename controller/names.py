"""Which -e names the testbed does not know (playbooks/validate.yml refuses them before anything starts).

Known: the experiment's variables (experiment/variables.py), every option of every role's
meta/argument_specs.yml (a role variable set with -e stays legal), every variable the run's inventories set
(group_vars, host_vars, and the vars of a YAML inventory file), and Ansible's own (``ansible_*``). Nothing
here is a second list kept by hand.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from experiment.variables import BY_NAME

ROLES = Path(__file__).resolve().parents[1] / "roles"


def _role_options() -> set[str]:
    names: set[str] = set()
    for spec in ROLES.glob("*/meta/argument_specs.yml"):
        entry_points = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs") or {}
        for entry_point in entry_points.values():
            names.update((entry_point or {}).get("options") or {})
    return names


def _inventory_node(node: Any, names: set[str]) -> None:
    """Variable names of a YAML inventory group (its vars, its hosts' vars, its children)."""
    if not isinstance(node, dict):
        return
    names.update(node.get("vars") or {})
    for host_vars in (node.get("hosts") or {}).values():
        names.update(host_vars or {})
    for child in (node.get("children") or {}).values():
        _inventory_node(child, names)


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _inventory_names(sources: list[str]) -> set[str]:
    """Variable names set by the inventories: group_vars/host_vars files, and a YAML inventory's groups."""
    names: set[str] = set()
    for source in map(Path, sources):
        directory = source if source.is_dir() else source.parent
        for sub in ("group_vars", "host_vars"):
            for path in (directory / sub).rglob("*.y*ml"):
                document = _yaml(path)
                names.update(document if isinstance(document, dict) else {})
        for path in directory.glob("*.y*ml") if source.is_dir() else [source]:
            document = _yaml(path)
            for group in (document if isinstance(document, dict) else {}).values():
                _inventory_node(group, names)
    return names


def testbed_unknown_variables(given: list[str], inventory_sources: list[str] | None = None) -> list[str]:
    """One message per unknown name, with the closest known names.

    >>> for problem in testbed_unknown_variables(["peer", "modle", "peers", "trainer_venv", "ansible_user"]):
    ...     print(problem)
    unknown variable 'modle': did you mean 'model'?
    unknown variable 'peer': did you mean 'peers'?
    """
    known = set(BY_NAME) | _role_options() | _inventory_names(list(inventory_sources or []))
    problems = []
    for name in sorted(set(given)):
        if name in known or name.startswith("ansible_"):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.75)
        hint = (
            f": did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else " (not a variable of the testbed)"
        )
        problems.append(f"unknown variable {name!r}{hint}")
    return problems
