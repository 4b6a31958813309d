"""The experiment playbook's variables as the grid runner checks them before any run starts.

The variables, their kinds and their order come from their one definition (experiment/variables.py), which the
playbook's validation uses too: a grid that passes here is not refused by the playbook for its values. Each
check returns the normalised value (ints for counts, floats for rates, bools for flags) so that equal settings
always hash to the same experiment id.
"""

from __future__ import annotations

import math
from typing import Any

from experiment.variables import DILATION_WORDS, VARIABLES

#: variables the grid runner sets itself (id from the settings and repeat, force for retries, results_root
#: from --results-dir); a grid file must not set them
RUNNER_VARS = tuple(variable.name for variable in VARIABLES if variable.set_by_grid)

#: every playbook variable a grid may set, in the order runs are printed, with its kind:
#: int (>= 1), int0 (>= 0), float (> 0), float0 (>= 0), bool, str, dilation, or a tuple of choices
VAR_KINDS: dict[str, Any] = {v.name: v.kind for v in VARIABLES if not v.set_by_grid}
PLAYBOOK_VARS = tuple(VAR_KINDS)


class VarError(ValueError):
    """A value the experiment playbook would refuse."""


def _integer(value: Any, minimum: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise VarError(f"must be an integer >= {minimum} (got {value!r})")
    return value


def _positive_number(value: Any) -> float:
    valid = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not valid or not value > 0:
        raise VarError(f"must be a number > 0 (got {value!r})")
    return float(value)


def _check(kind: Any, value: Any) -> Any:
    if isinstance(kind, tuple):
        if value not in kind:
            raise VarError(f"must be one of {', '.join(kind)} (got {value!r})")
        return value
    if kind in ("int", "int0"):
        return _integer(value, 1 if kind == "int" else 0)
    if kind == "float":
        return _positive_number(value)
    if kind == "float0":
        if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
            return 0.0
        return _positive_number(value)
    if kind == "dilation":
        if value in DILATION_WORDS:
            return value
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if number and value >= 1:
            return float(value)
        raise VarError(f"must be auto, off or a factor >= 1 (got {value!r})")
    if kind == "bool":
        if not isinstance(value, bool):
            raise VarError(f"must be true or false (got {value!r})")
        return value
    if not isinstance(value, str) or not value:
        raise VarError(f"must be a non-empty string (got {value!r})")
    return value


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
    if settings.get("dataset") in ("cifar10", "imagefolder") and not settings.get("data_root"):
        raise VarError(f"dataset={settings['dataset']} needs data_root (a directory under /mnt/datasets)")
