"""Grid files: load, check and expand into the list of runs.

A grid file (YAML) holds::

    name: thesis                  # optional, default: the file's stem; names the status file
    description: ...              # optional
    noise_floor: true             # optional, default true: `solo` runs first (NOISE_FLOOR_BLOCK); N: N runs
    order: blocks                 # optional: blocks (default) or interleaved (see the end of this docstring)
    compute_limit: 0.05           # optional, default 0.05: a run's received compute may stray this far from
                                  # the calibration (false: not checked); outside it the run is run again
    compute_reruns: 2             # optional, default 2: how many times, before the last is kept and said
    headline:                     # optional: named before the runs, the report's confirmatory family
      loss_target: 1.0            #   the target loss and accuracy its times to target use
      accuracy_target: 0.75
      correction: holm            #   holm (default) or none: over the family's comparisons and metrics
      comparisons:                #   each: name, runs and against (expressions as --only's, over the runs)
        - name: 2 x 8 against the baseline
          runs: "block == 'peers' and peers == 2"
          against: "block == 'baseline'"
    constants: {name: value}      # numbers usable in expressions, never passed to the playbook
    fixed: {var: value}           # playbook variables shared by every block
    derived: {var: expression}    # shared derived values (a block's own value for the key wins)
    blocks:                       # each block is one table: the product of its axes, repeated
      - name: baseline
        repeats: 4                # default 3 (DEFAULT_REPEATS)
        fixed: {var: value}
        axes: {var: [value, ...]}
        derived: {var: expression}

Every `var` is an experiment playbook variable (controller/grid/vars.py). A run's settings are the shared
fixed values, overridden by the block's fixed values and one combination of its axes; then the shared derived
values (for keys the block does not set) and the block's derived values are evaluated in file order.
Expressions (controller/grid/expr.py) read the constants, the settings so far and ``repeat`` (1-based). Runs
whose strategy is ``baseline`` are the baselines the report compares the others with.

A block runs DEFAULT_REPEATS (3) repeats unless it sets ``repeats:``: one run cannot tell a real difference
from this testbed's run-to-run noise. The report's intervals hold from 2 runs a side (MIN_RUNS), but at 2 the
t-quantile is 4.3-12.7 and a 25 % difference is found a third of the time at 5 % noise; at 3, 92 % of the time
(docs/statistics.md, the Monte Carlo table): 3 is the fewest that makes the intervals usable.
Repeats are independent samples, not copies: where a block sets no ``seed``, repeat r runs with seed r - 1
(model initialisation and data order; the first repeat keeps the trainer's default 0). The experiment id does
not include this seed, so a grid's ids stay the same.

The testbed's noise floor: unless the grid says ``noise_floor: false``, its first run is a short
``solo`` run (block ``noise-floor``): the grid's run with the most peers (at least 2), every peer training
alone, identical loops in identical containers, as many steps as that run (at most NOISE_FLOOR_STEPS),
DEFAULT_REPEATS times (``noise_floor: N`` in the grid file: N times; ``--repeat N``: N times). How far apart
the runs' samples/s land is the smallest difference the grid's results can show (one run gives no floor);
`trainer report` prints it. It runs whatever ``--only`` selects.

Runs are ordered block by block, repeat-major within a block (every setting once, then the second repeat,
...), so an interrupted grid has covered as many settings as possible. ``order: interleaved`` orders them
repeat-major across the whole grid: every setting of every block once, then the second repeat, so that a slow
hour of the machine or a grid continued on another day does not fall on one level of a factor. Within a
repeat the runs are grouped by the cluster's shape (peers, then vCPUs a peer), ascending in odd repeats and
descending in even ones, so that the local cluster changes shape as seldom as it can (ORDERS).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.grid.expr import Expression, ExpressionError, compile_expression, evaluate
from controller.grid.vars import PLAYBOOK_VARS, VarError, check_name, check_settings, check_var
from experiment.variables import BY_NAME, HIVEMIND_FIELDS

TOP_KEYS = (
    *("name", "description", "noise_floor", "order", "compute_limit", "compute_reruns", "headline"),
    *("constants", "fixed", "derived", "blocks"),
)
HEADLINE_KEYS = ("loss_target", "accuracy_target", "correction", "comparisons")
#: how the headline family's p-values are corrected for multiplicity
CORRECTIONS = ("holm", "none")
#: how far a run's received compute may stray from its calibration (controller/received_compute.py), and how
#: many times a run outside it is run again, where the grid file says neither
DEFAULT_COMPUTE_LIMIT = 0.05
DEFAULT_COMPUTE_RERUNS = 2
#: the values of a grid's ``order`` (module docstring): block by block, or repeat-major over every block
ORDERS = ("blocks", "interleaved")
BLOCK_KEYS = ("name", "description", "repeats", "fixed", "axes", "derived")
#: a block's repeats where it sets none: the fewest that give an interval with a spread
DEFAULT_REPEATS = 3
#: the noise-floor run's block name and most steps per peer (fewer where the grid's run has fewer)
NOISE_FLOOR_BLOCK = "noise-floor"
NOISE_FLOOR_STEPS = 100


class GridError(ValueError):
    """A grid file that cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class Run:
    """One experiment of a grid.

    :param index: 1-based position in the grid
    :param block: the name of the block it comes from
    :param repeat: 1-based repeat number
    :param settings: the experiment playbook variables, normalised (without experiment_id)
    :param experiment_id: deterministic id from the settings and the repeat (the results directory's name)
    """

    index: int
    block: str
    repeat: int
    settings: dict[str, Any]
    experiment_id: str

    @property
    def strategy(self) -> str:
        return self.settings.get("strategy", "hivemind")

    def extravars(self) -> dict[str, Any]:
        return {**self.settings, "experiment_id": self.experiment_id}


@dataclass(frozen=True)
class Grid:
    name: str
    path: Path
    description: str
    runs: tuple[Run, ...]
    blocks: tuple[str, ...] = field(default=())
    #: a run whose received compute strays further from the calibration is run again (None: not checked)
    compute_limit: float | None = DEFAULT_COMPUTE_LIMIT
    compute_reruns: int = DEFAULT_COMPUTE_RERUNS
    #: the confirmatory family named before the runs (None: every comparison is exploratory)
    headline: Headline | None = None

    def totals(self) -> Counter[str]:
        """Number of runs per strategy."""
        return Counter(run.strategy for run in self.runs)


@dataclass(frozen=True)
class Comparison:
    """One headline comparison: the runs selected by ``runs`` against those selected by ``against``."""

    name: str
    runs: str
    against: str


@dataclass(frozen=True)
class Headline:
    loss_target: float
    accuracy_target: float | None
    correction: str
    comparisons: tuple[Comparison, ...]


def experiment_id(settings: dict[str, Any], repeat: int) -> str:
    """A readable, deterministic id: the main settings, a hash of all settings, and the repeat.

    >>> experiment_id({"strategy": "baseline", "peers": 1, "batch_size": 32, "learning_rate": 0.01}, 2)
    'baseline-p1-bs32-lr0p01-6f0ceda4-r2'
    >>> experiment_id({"strategy": "deepspeed", "zero_stage": 3, "peers": 2}, 1)
    'deepspeed-z3-p2-d946c36b-r1'
    >>> experiment_id({"strategy": "diloco", "sync_every": 50, "peers": 2}, 1)
    'diloco-h50-p2-4c203cc8-r1'
    """
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    parts = [settings.get("strategy", "hivemind")]
    labels = {
        "zero_stage": "z",
        "sync_every": "h",
        "peers": "p",
        "batch_size": "bs",
        "learning_rate": "lr",
        "target_batch_size": "tbs",
    }
    for key, label in labels.items():
        if key in settings:
            value = settings[key]
            # no '.': Hivemind refuses it in the run id it uses as its DHT prefix (0.01 -> 0p01)
            text = f"{value:g}".replace(".", "p") if isinstance(value, float) else str(value)
            parts.append(f"{label}{text}")
    if "local_updates" in settings:
        parts.append(f"lu{int(settings['local_updates'])}")
    return "-".join([*parts, digest, f"r{repeat}"])


def load_grid(path: str | Path, *, repeats: int | None = None) -> Grid:
    """Read, check and expand a grid file; raise GridError naming the file and key on any problem.

    :param repeats: if given, overrides every block's `repeats` (``trainer grid --repeat N``)
    """
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise GridError(f"{path}: cannot read grid file: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise GridError(f"{path}: not valid YAML: {error}") from None
    return parse_grid(document, path=path, repeats=repeats)


def parse_grid(document: Any, *, path: Path, repeats: int | None = None) -> Grid:
    where = _Where(path)
    top = where.mapping(document, "", TOP_KEYS)
    name = str(top.get("name", path.stem))
    constants = where.mapping(top.get("constants", {}), "constants", None)
    for key, value in constants.items():
        if key in PLAYBOOK_VARS or key in ("repeat",):
            where.fail(f"constants.{key}", "clashes with a playbook variable or 'repeat'; rename it")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            where.fail(f"constants.{key}", f"must be a number or a string (got {value!r})")
    shared_fixed = _checked_values(where, "fixed", top.get("fixed", {}))
    shared_derived = _expressions(where, "derived", top.get("derived", {}))
    blocks = top.get("blocks")
    if not isinstance(blocks, list) or not blocks:
        where.fail("blocks", "must be a non-empty list of blocks")
    if repeats is not None and repeats < 1:
        raise GridError(f"--repeat must be >= 1 (got {repeats})")

    runs: list[Run] = []
    names: list[str] = []
    for number, block in enumerate(blocks):
        block_runs, block_name = _expand_block(
            where, f"blocks[{number}]", block, constants, shared_fixed, shared_derived, repeats, len(runs)
        )
        if block_name in names:
            where.fail(f"blocks[{number}].name", f"duplicate block name {block_name!r}")
        names.append(block_name)
        runs.extend(block_runs)
    seen: dict[str, Run] = {}
    for run in runs:
        if run.experiment_id in seen:
            other = seen[run.experiment_id]
            where.fail(
                f"blocks ({other.block} and {run.block})",
                f"two runs have the same settings and repeat ({run.experiment_id})",
            )
        seen[run.experiment_id] = run
    order = top.get("order", ORDERS[0])
    if order not in ORDERS:
        where.fail("order", f"must be one of {', '.join(ORDERS)} (got {order!r})")
    if order == "interleaved":
        runs = [dataclasses.replace(run, index=i) for i, run in enumerate(interleaved(runs), start=1)]
    noise_floor = top.get("noise_floor", True)
    if not isinstance(noise_floor, bool) and not (isinstance(noise_floor, int) and noise_floor >= 2):
        where.fail(
            "noise_floor", f"must be true, false or a number of runs of at least 2 (got {noise_floor!r})"
        )
    if noise_floor:
        floor_runs = DEFAULT_REPEATS if noise_floor is True else noise_floor
        floor = noise_floor_runs(runs, floor_runs if repeats is None else repeats)
        runs = [*floor, *(dataclasses.replace(run, index=run.index + len(floor)) for run in runs)]
        names.insert(0, NOISE_FLOOR_BLOCK)
    description = str(top.get("description", "")).strip()
    limit = top.get("compute_limit", DEFAULT_COMPUTE_LIMIT)
    if limit is False:
        limit = None
    elif isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 < limit < 1:
        where.fail("compute_limit", f"must be a fraction between 0 and 1, or false (got {limit!r})")
    reruns = top.get("compute_reruns", DEFAULT_COMPUTE_RERUNS)
    if isinstance(reruns, bool) or not isinstance(reruns, int) or reruns < 0:
        where.fail("compute_reruns", f"must be a number of runs, 0 or more (got {reruns!r})")
    headline = _headline(where, top["headline"], runs) if "headline" in top else None
    return Grid(
        name=name,
        path=path,
        description=description,
        runs=tuple(runs),
        blocks=tuple(names),
        compute_limit=None if limit is None else float(limit),
        compute_reruns=reruns,
        headline=headline,
    )


def _headline(where: _Where, value: Any, runs: list[Run]) -> Headline:
    """The grid's ``headline``, checked: positive targets, a known correction, and comparisons whose
    expressions each select at least one of the grid's runs."""
    top = where.mapping(value, "headline", HEADLINE_KEYS)
    targets: dict[str, float | None] = {}
    for key in ("loss_target", "accuracy_target"):
        target = top.get(key)
        if target is None and key == "accuracy_target":
            targets[key] = None
            continue
        if isinstance(target, bool) or not isinstance(target, int | float) or target <= 0:
            where.fail(f"headline.{key}", f"must be a positive number (got {target!r})")
        targets[key] = float(target)
    correction = top.get("correction", CORRECTIONS[0])
    if correction not in CORRECTIONS:
        where.fail("headline.correction", f"must be one of {', '.join(CORRECTIONS)} (got {correction!r})")
    listed = top.get("comparisons")
    if not isinstance(listed, list) or not listed:
        where.fail("headline.comparisons", "must be a non-empty list of {name, runs, against}")
    comparisons = []
    for index, entry in enumerate(listed):
        key = f"headline.comparisons[{index}]"
        entry = where.mapping(entry, key, ("name", "runs", "against"))
        for part in ("name", "runs", "against"):
            if not isinstance(entry.get(part), str) or not entry[part].strip():
                where.fail(f"{key}.{part}", "must be a non-empty text")
        for part in ("runs", "against"):
            if not matching_runs(runs, entry[part], f"{key}.{part}", where):
                where.fail(f"{key}.{part}", f"selects none of the grid's runs ({entry[part]!r})")
        comparisons.append(Comparison(entry["name"], entry["runs"], entry["against"]))
    names = [c.name for c in comparisons]
    if len(set(names)) != len(names):
        where.fail("headline.comparisons", "two comparisons have the same name")
    return Headline(targets["loss_target"], targets["accuracy_target"], correction, tuple(comparisons))


def matching_runs(
    runs: list[Run] | tuple[Run, ...], text: str, key: str = "", where: Any = None
) -> list[Run]:
    """The runs an expression over their settings, ``repeat`` and ``block`` selects (as ``--only``)."""
    try:
        expression = compile_expression(text)
        selected = []
        for run in runs:
            names = {var: None for var in PLAYBOOK_VARS}
            names.update(run.settings, repeat=run.repeat, block=run.block)
            if evaluate(expression, names):
                selected.append(run)
        return selected
    except ExpressionError as error:
        if where is None:
            raise GridError(f"{key}: {error}") from None
        where.fail(key, str(error))
        raise AssertionError("unreachable") from None


def interleaved(runs: list[Run]) -> list[Run]:
    """``runs`` repeat-major over every block, each repeat grouped by the cluster's shape (peers, vCPUs a
    peer; a baseline is one host), ascending in odd repeats and descending in even ones: the shape a repeat
    ends with is the next one's first. Within a shape the grid file's order stays.

    >>> def run(index, block, repeat, peers):
    ...     settings = {"peers": peers, "vcpus": 16 // peers}
    ...     return Run(index, block, repeat, settings, f"{block}-{peers}-r{repeat}")
    >>> grid = [run(1, "a", 1, 1), run(2, "a", 2, 1), run(3, "b", 1, 8), run(4, "b", 1, 2), run(5, "b", 2, 8),
    ...         run(6, "b", 2, 2)]
    >>> [r.experiment_id for r in interleaved(grid)]
    ['a-1-r1', 'b-2-r1', 'b-8-r1', 'b-8-r2', 'b-2-r2', 'a-1-r2']
    """

    def shape(run: Run) -> tuple[int, int]:
        peers = 1 if run.strategy == "baseline" else int(run.settings.get("peers", BY_NAME["peers"].default))
        vcpus = run.settings.get("vcpus")
        return peers, -int(vcpus) if isinstance(vcpus, int) else 0

    ordered: list[Run] = []
    for repeat in sorted({run.repeat for run in runs}):
        of_repeat = sorted((run for run in runs if run.repeat == repeat), key=shape, reverse=repeat % 2 == 0)
        ordered += of_repeat
    return ordered


def noise_floor_runs(runs: list[Run], repeats: int) -> list[Run]:
    """The grid's noise-floor runs (module docstring): its run with the most peers, as `solo`, short,
    ``repeats`` times (the floor is the spread between runs: one run gives none)."""

    def setting(run: Run, var: str) -> int:
        return int(run.settings.get(var, BY_NAME[var].default))

    source = max(runs, key=lambda run: setting(run, "peers"))
    settings = {**source.settings, "strategy": "solo", "eval_every": 0, "seed": 0}
    settings["peers"] = max(2, setting(source, "peers"))
    settings["max_steps"] = min(setting(source, "max_steps"), NOISE_FLOOR_STEPS)
    # Hivemind's own settings do not apply to peers that train alone
    ordered = {var: settings[var] for var in PLAYBOOK_VARS if var in settings and var not in HIVEMIND_FIELDS}
    return [
        Run(r, NOISE_FLOOR_BLOCK, r, ordered, f"{NOISE_FLOOR_BLOCK}-{experiment_id(ordered, r)}")
        for r in range(1, repeats + 1)
    ]


def _expand_block(
    where: _Where,
    key: str,
    block: Any,
    constants: dict[str, Any],
    shared_fixed: dict[str, Any],
    shared_derived: dict[str, Expression],
    repeats_override: int | None,
    offset: int,
) -> tuple[list[Run], str]:
    block = where.mapping(block, key, BLOCK_KEYS)
    name = block.get("name")
    if not isinstance(name, str) or not name:
        where.fail(f"{key}.name", "every block needs a name")
    key = f"{key} ({name})"
    repeats = block.get("repeats", DEFAULT_REPEATS)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        where.fail(f"{key}.repeats", f"must be an integer >= 1 (got {repeats!r})")
    if repeats_override is not None:
        repeats = repeats_override
    fixed = _checked_values(where, f"{key}.fixed", block.get("fixed", {}))
    axes = where.mapping(block.get("axes", {}), f"{key}.axes", None)
    checked_axes: dict[str, list[Any]] = {}
    for var, values in axes.items():
        if not isinstance(values, list) or not values:
            where.fail(f"{key}.axes.{var}", "an axis must be a non-empty list of values")
        checked = [where.var(f"{key}.axes.{var}", var, value) for value in values]
        if len(set(map(repr, checked))) != len(checked):
            where.fail(f"{key}.axes.{var}", f"duplicate values in {values!r}")
        checked_axes[var] = checked
    derived = _expressions(where, f"{key}.derived", block.get("derived", {}))
    for var in set(fixed) & set(checked_axes) | set(fixed) & set(derived) | set(checked_axes) & set(derived):
        where.fail(f"{key}.{var}", "set twice in the block (fixed, axes and derived exclude each other)")
    own = set(fixed) | set(checked_axes) | set(derived)
    expressions = {var: expr for var, expr in shared_derived.items() if var not in own}
    expressions.update(derived)

    combinations = list(itertools.product(*checked_axes.values()))
    runs: list[Run] = []
    for repeat in range(1, repeats + 1):
        for combination in combinations:
            settings = {**shared_fixed, **fixed, **dict(zip(checked_axes, combination, strict=True))}
            label = ", ".join(f"{var}={value}" for var, value in zip(checked_axes, combination, strict=True))
            for var, expression in expressions.items():
                names = {**constants, **settings, "repeat": repeat}
                try:
                    value = evaluate(expression, names)
                except ExpressionError as error:
                    where.fail(f"{key}.derived.{var}", f"{error} (run {label or 'of the block'})")
                settings[var] = where.var(f"{key}.derived.{var}", var, value, label)
            try:
                check_settings(settings)
            except VarError as error:
                where.fail(key, f"{error} (run {label or 'of the block'})")
            ordered = {var: settings[var] for var in PLAYBOOK_VARS if var in settings}
            identity = experiment_id(ordered, repeat)
            if "seed" not in ordered:  # each repeat its own seed, outside the id
                ordered["seed"] = repeat - 1
            index = offset + len(runs) + 1
            runs.append(Run(index, name, repeat, ordered, identity))
    return runs, name


def _checked_values(where: _Where, key: str, values: Any) -> dict[str, Any]:
    values = where.mapping(values, key, None)
    return {var: where.var(f"{key}.{var}", var, value) for var, value in values.items()}


def _expressions(where: _Where, key: str, values: Any) -> dict[str, Expression]:
    values = where.mapping(values, key, None)
    expressions = {}
    for var, source in values.items():
        try:
            check_name(var)
        except VarError as error:
            where.fail(f"{key}.{var}", str(error))
        if not isinstance(source, str):
            where.fail(f"{key}.{var}", f"a derived value is an expression string (got {source!r}); use fixed")
        try:
            expressions[var] = compile_expression(source)
        except ExpressionError as error:
            where.fail(f"{key}.{var}", str(error))
    return expressions


@dataclass(frozen=True)
class _Where:
    """Builds error messages that name the grid file and the key."""

    path: Path

    def fail(self, key: str, message: str) -> None:
        raise GridError(f"{self.path}: {key}: {message}" if key else f"{self.path}: {message}")

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...] | None) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping (got {type(value).__name__})")
        for name in value:
            if not isinstance(name, str):
                self.fail(key, f"keys must be strings (got {name!r})")
            if allowed is not None and name not in allowed:
                self.fail(f"{key}.{name}" if key else name, f"unknown key (allowed: {', '.join(allowed)})")
        return value

    def var(self, key: str, var: str, value: Any, label: str = "") -> Any:
        try:
            return check_var(var, value)
        except VarError as error:
            suffix = f" (run {label})" if label else ""
            self.fail(key, f"{error}{suffix}")
        raise AssertionError("unreachable")
