"""The experiment playbook's variables as the grid runner checks them before any run starts.

The rules mirror `playbooks/validate.yml` (the owner; docs/architecture.md "Experiment playbook variables"):
a grid that passes here is not refused by the playbook for its values. Each check returns the normalised
value (ints for counts, floats for rates, bools for flags) so equal settings hash to the same experiment id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.config import DATASETS, MODELS, OPTIMIZERS, STRATEGIES

DATASET_STORAGES = ("cephfs", "local", "nfs")

#: variables the grid runner sets itself; a grid file must not
RUNNER_VARS = ("experiment_id", "force")


class VarError(ValueError):
    """A value the experiment playbook would refuse."""


def _integer(value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise VarError(f"must be an integer >= {minimum} (got {value!r})")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < minimum:
        raise VarError(f"must be an integer >= {minimum} (got {value!r})")
    return value


def _positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise VarError(f"must be a number > 0 (got {value!r})")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise VarError(f"must be true or false (got {value!r})")
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise VarError(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return check


#: every playbook variable a grid may set, in the order runs are printed, with its check
PLAYBOOK_VARS: dict[str, Callable[[Any], Any]] = {
    "strategy": _choice(STRATEGIES),
    "peers": lambda value: _integer(value, 1),
    "vcpus": lambda value: _integer(value, 1),
    "model": _choice(MODELS),
    "dataset": _choice(DATASETS),
    "dataset_storage": _choice(DATASET_STORAGES),
    "batch_size": lambda value: _integer(value, 1),
    "learning_rate": _positive_number,
    "optimizer": _choice(OPTIMIZERS),
    "max_steps": lambda value: _integer(value, 1),
    "target_batch_size": lambda value: _integer(value, 1),
    "local_updates": _boolean,
    "matchmaking_time": _positive_number,
    "averaging_timeout": _positive_number,
    "data_workers": lambda value: _integer(value, 0),
    "eval_every": lambda value: _integer(value, 0),
    "target_loss": _positive_number,
    "seed": lambda value: _integer(value, 0),
}


def check_name(name: str) -> None:
    """Raise VarError unless a grid file may set playbook variable `name`."""
    if name in RUNNER_VARS:
        raise VarError("is set by the grid runner (from the settings and the repeat), not by a grid file")
    if name not in PLAYBOOK_VARS:
        raise VarError(f"is not an experiment playbook variable (known: {', '.join(PLAYBOOK_VARS)})")


def check_var(name: str, value: Any) -> Any:
    """Return `value` normalised for playbook variable `name`; raise VarError naming the rule it breaks."""
    check_name(name)
    return PLAYBOOK_VARS[name](value)


def check_settings(settings: dict[str, Any]) -> None:
    """Check rules between variables (after each value passed `check_var`)."""
    if settings.get("strategy") == "baseline" and settings.get("peers", 1) != 1:
        raise VarError(f"peers: a baseline runs on one host, set peers: 1 (got {settings['peers']!r})")
