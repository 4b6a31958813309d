"""The experiment playbook's variables as the grid runner checks them before any run starts.

The variables, their kinds and their order come from their one definition (experiment/variables.py), which the
playbook's validation uses too: a grid that passes here is not refused by the playbook for its values. Each
check returns the normalised value (ints for counts, floats for rates, bools for flags) so that equal settings
always hash to the same experiment id.
"""

from __future__ import annotations

from typing import Any

from experiment.variables import VARIABLES, KindError, parse_value, rule_problems

#: variables the grid runner sets itself (id from the settings and repeat, force for retries, results_root
#: from --results-dir); a grid file must not set them
RUNNER_VARS = tuple(variable.name for variable in VARIABLES if variable.set_by_grid)

#: every playbook variable a grid may set, in the order runs are printed, with its kind:
#: int (>= 1), int0 (>= 0), float (> 0), float0 (>= 0), bool, str, dilation, or a tuple of choices
VAR_KINDS: dict[str, Any] = {v.name: v.kind for v in VARIABLES if not v.set_by_grid}
PLAYBOOK_VARS = tuple(VAR_KINDS)


class VarError(ValueError):
    """A value the experiment playbook would refuse."""


def _check(kind: Any, value: Any) -> Any:
    """The playbook's own parser (experiment/variables.py ``parse_value``), on values as YAML gave them."""
    try:
        return parse_value(kind, value, typed=True)
    except KindError as error:
        raise VarError(str(error)) from None


def check_name(name: str) -> None:
    """Raise VarError unless a grid file may set playbook variable `name`."""
    if name in RUNNER_VARS:
        raise VarError("is set by the grid runner (from the settings, the repeat and --results-dir)")
    if name not in VAR_KINDS:
        raise VarError(f"is not an experiment playbook variable (known: {', '.join(VAR_KINDS)})")


def check_var(name: str, value: Any) -> Any:
    """Return `value` normalised for playbook variable `name`; raise VarError naming the rule it breaks."""
    check_name(name)
    return _check(VAR_KINDS[name], value)


def check_settings(settings: dict[str, Any]) -> None:
    """Rules between variables (after each value passed `check_var`), as the playbook applies them."""
    for _, problem in rule_problems(settings):
        raise VarError(problem)
