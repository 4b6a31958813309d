"""The experiment's variables, defined once: name, kind, default and meaning of each.

Everything else is derived from ``VARIABLES``: the experiment playbook's validation
(``controller/plan.py``), the grid runner's checks (``controller/grid/vars.py``), the
settings handed to the trainer (``TRAINER_FIELDS``, ``HIVEMIND_FIELDS``, ``DATA_PARALLEL_FIELDS``: each maps
onto the trainer flag of the same name) and the table in ``docs/architecture.md`` (``python -m
experiment.variables --write-docs``; a test fails when it is stale). Adding a variable is one entry here, plus
the code that uses it.

Kinds: ``int`` (>= 1), ``int0`` (>= 0), ``float`` (> 0), ``float0`` (>= 0), ``bool``, ``str``, ``dilation``
(``auto``, ``off`` or a number >= 1), or a tuple of the allowed values. Standard library only: the
controller's Ansible plugins import it too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

STRATEGIES = ("hivemind", "baseline", "ddp", "zero", "fsdp", "deepspeed", "diloco", "solo")
#: the strategies that run one rank per host over gloo, started at rank 0's rendezvous, each rank on its own
#: shard of the data: the data_parallel_peer role (diloco: one torchft replica per host after it)
DATA_PARALLEL_STRATEGIES = ("ddp", "zero", "fsdp", "deepspeed", "diloco")
#: the role that runs a strategy's trainer on each host (playbooks/run.yml reads it through the plan's
#: ``trainer_role``): Hivemind's peers, one data-parallel rank or DiLoCo replica a host, or a baseline
TRAINER_ROLES = {
    "hivemind": "hivemind_peer",
    **dict.fromkeys(DATA_PARALLEL_STRATEGIES, "data_parallel_peer"),
    "baseline": "baseline",
    "solo": "baseline",
}
ZERO_STAGES = (1, 2, 3)
DEFAULT_ZERO_STAGE = 2
#: DiLoCo's defaults: inner steps between syncs (H), the outer Nesterov SGD's learning rate and momentum (the
#: paper's outer optimizer: arXiv 2311.08105, section 3)
DEFAULT_SYNC_EVERY = 100
DEFAULT_OUTER_LEARNING_RATE = 0.7
DEFAULT_OUTER_MOMENTUM = 0.9
MODELS = ("resnet18", "smallcnn")
DATASETS = ("fashion-mnist", "synthetic", "cifar10", "imagefolder")
STORAGES = ("cephfs", "local", "nfs")
OPTIMIZERS = ("sgd", "adam")
PREPROCESSING = ("decode", "cached")
DHT_BOOTSTRAPS = ("peer", "monitor")
#: datasets a run must be given the directory of (synthetic is made up; Debian installs fashion-mnist's)
DATASETS_NEEDING_ROOT = ("cifar10", "imagefolder")
#: what Hivemind compresses on the wire (hivemind.compression): none, float16 (scaled: per-tensor scale
#: first), 8-bit uniform or quantile quantization, 8-bit blockwise quantization (needs bitsandbytes)
COMPRESSIONS = ("none", "fp16", "scaled_fp16", "uint8", "quantile8", "blockwise8")
#: the compressions that need a package the hosts do not install (requirements/node.txt)
COMPRESSION_PACKAGES = {"blockwise8": "bitsandbytes"}
#: the words time_dilation takes besides a factor >= 1
DILATION_WORDS = ("auto", "off")

# which trainers get a variable as the flag of the same name
ALL_TRAINERS, HIVEMIND, DATA_PARALLEL = "all", "hivemind", "data_parallel"
DEEPSPEED, DILOCO = "deepspeed", "diloco"


@dataclass(frozen=True)
class Variable:
    name: str
    kind: Any
    default: Any
    meaning: str
    #: the trainers it is handed to as the flag of the same name (ALL_TRAINERS, HIVEMIND, DATA_PARALLEL);
    #: none: the playbook's own
    trainers: tuple[str, ...] = ()
    #: set by `trainer grid` itself (from the settings, the repeat, --results-dir): a grid file must not
    set_by_grid: bool = False
    #: whether it defines the setting: True where it changes what or how the run trains, what it measures
    #: or its network (runs that differ in it are different settings, never repeats of one); False for
    #: the run's bookkeeping (seed, ids, timeouts of the playbook, monitoring). Every variable says.
    defines_setting: bool | None = None

    def kind_text(self) -> str:
        return ", ".join(self.kind) if isinstance(self.kind, tuple) else self.kind


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "peers", "int", 8, "peers in the run (a baseline uses the first host only)", defines_setting=True
    ),
    Variable(
        "strategy",
        STRATEGIES,
        "hivemind",
        "how the peers train together (solo: each peer alone, a baseline per host: no communication)",
        defines_setting=True,
    ),
    Variable("model", MODELS, "resnet18", "the network trained", (ALL_TRAINERS,), defines_setting=True),
    Variable(
        "dataset", DATASETS, "fashion-mnist", "the data trained on", (ALL_TRAINERS,), defines_setting=True
    ),
    Variable(
        "dataset_storage",
        STORAGES,
        None,
        "where peers read the dataset from (local cluster: cephfs)",
        defines_setting=True,
    ),
    Variable(
        "data_root",
        "str",
        None,
        "dataset directory on the peers (default /mnt/datasets/<dataset>)",
        defines_setting=False,
    ),
    Variable("batch_size", "int", 32, "samples per step and peer", (ALL_TRAINERS,), defines_setting=True),
    Variable(
        "learning_rate", "float", 0.01, "the optimizer's learning rate", (ALL_TRAINERS,), defines_setting=True
    ),
    Variable("optimizer", OPTIMIZERS, "sgd", "the optimizer", (ALL_TRAINERS,), defines_setting=True),
    Variable("max_steps", "int", 1000, "steps each peer takes", (ALL_TRAINERS,), defines_setting=True),
    Variable(
        "seed",
        "int0",
        0,
        "seed of the model's initialisation and the data order",
        (ALL_TRAINERS,),
        defines_setting=False,
    ),
    Variable(
        "target_batch_size",
        "int",
        4096,
        "Hivemind: samples of all peers per epoch",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "local_updates",
        "bool",
        False,
        "Hivemind: step locally, average parameters (no gradients)",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "matchmaking_time",
        "float",
        5.0,
        "Hivemind: seconds to form an averaging group",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "next_chunk_timeout",
        "float",
        None,
        "Hivemind: seconds an all-reduce waits for a peer's next part before it goes on without it "
        "(default: the matchmaking time, as Hivemind's)",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "average_state_every",
        "int",
        1,
        "Hivemind: average parameters every N epochs",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "compression",
        COMPRESSIONS,
        "none",
        "Hivemind: how the averaged gradients, parameters and downloaded state are compressed on the wire",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "averaging_timeout",
        "float",
        60.0,
        "seconds a round (DDP/ZeRO/FSDP/DeepSpeed: a collective; DiLoCo: a sync's all-reduce) may take",
        (HIVEMIND, DATA_PARALLEL),
        defines_setting=True,
    ),
    Variable(
        "zero_stage",
        "int",
        None,
        "DeepSpeed: ZeRO stage 1, 2 or 3 (default 2; only with strategy=deepspeed)",
        (DEEPSPEED,),
        defines_setting=True,
    ),
    Variable(
        "sync_every",
        "int",
        None,
        f"DiLoCo: inner steps between syncs, H (default {DEFAULT_SYNC_EVERY}; only with strategy=diloco)",
        (DILOCO,),
        defines_setting=True,
    ),
    Variable(
        "outer_learning_rate",
        "float",
        None,
        f"DiLoCo: the outer Nesterov SGD's learning rate (default {DEFAULT_OUTER_LEARNING_RATE})",
        (DILOCO,),
        defines_setting=True,
    ),
    Variable(
        "outer_momentum",
        "float0",
        None,
        f"DiLoCo: the outer Nesterov SGD's momentum, below 1 (default {DEFAULT_OUTER_MOMENTUM})",
        (DILOCO,),
        defines_setting=True,
    ),
    Variable(
        "dht_bootstrap",
        DHT_BOOTSTRAPS,
        "peer",
        "Hivemind: the first peer or a DHT-only node on the monitor",
        defines_setting=True,
    ),
    Variable(
        "vcpus",
        "int",
        None,
        "vCPUs per peer (default: each host's vcpus, locally 16/peers)",
        defines_setting=True,
    ),
    Variable(
        "data_workers",
        "int0",
        0,
        "data-loading worker processes per peer",
        (ALL_TRAINERS,),
        defines_setting=True,
    ),
    Variable(
        "preprocessing",
        PREPROCESSING,
        "decode",
        "imagefolder: decode each step or cache",
        (ALL_TRAINERS,),
        defines_setting=True,
    ),
    Variable(
        "eval_every", "int0", 0, "steps between evaluations (0: none)", (ALL_TRAINERS,), defines_setting=True
    ),
    Variable(
        "eval_batches",
        "int0",
        0,
        "validation batches per evaluation (0: the whole split)",
        (ALL_TRAINERS,),
        defines_setting=True,
    ),
    Variable(
        "target_loss",
        "float",
        None,
        "loss the report measures time to",
        (ALL_TRAINERS,),
        defines_setting=True,
    ),
    Variable(
        "experiment_id",
        "str",
        None,
        "results directory name (default: settings + timestamp)",
        set_by_grid=True,
        defines_setting=False,
    ),
    Variable(
        "force",
        "bool",
        False,
        "overwrite complete results of the same experiment_id",
        set_by_grid=True,
        defines_setting=False,
    ),
    Variable(
        "refresh",
        "bool",
        False,
        "run every set-up play, also on hosts already converged for this checkout, and take the CPU and "
        "bandwidth probes again rather than reuse a recent one of the same configuration",
        defines_setting=False,
    ),
    Variable(
        "start_timeout", "int", 300, "seconds the start barrier waits for every peer", defines_setting=False
    ),
    Variable(
        "min_peers",
        "int0",
        0,
        "Hivemind: start with this many when the barrier times out (0: all)",
        (HIVEMIND,),
        defines_setting=True,
    ),
    Variable(
        "finish_grace",
        "float",
        30.0,
        "Hivemind: seconds a finished peer keeps serving the others",
        (HIVEMIND,),
        defines_setting=False,
    ),
    Variable(
        "run_timeout",
        "int",
        3600,
        "modelled seconds the playbook waits for the run (x D on a dilated local run)",
        defines_setting=False,
    ),
    Variable(
        "progress_interval",
        "int",
        30,
        "seconds between the playbook's progress reports",
        defines_setting=False,
    ),
    Variable("monitoring", "bool", True, "Prometheus and Grafana on the monitor host", defines_setting=False),
    Variable(
        "measure_bandwidth",
        "bool",
        True,
        "measure the link from the last peer to the first before a run",
        defines_setting=False,
    ),
    Variable(
        "cpu_probe_seconds",
        "float0",
        5.0,
        "seconds every peer spins at once before the run (0: no probe)",
        defines_setting=False,
    ),
    Variable(
        "results_root",
        "str",
        None,
        "controller directory of the results (default results/)",
        set_by_grid=True,
        defines_setting=False,
    ),
    Variable(
        "time_dilation",
        "dilation",
        "auto",
        "times slower a local peer runs than the VM it models (auto: its vCPUs / its cores, 1 on VMs; off; "
        "or a factor: each local peer gets vcpus / factor cores); time settings and links are dilated by it",
        defines_setting=True,
    ),
    Variable(
        "local_rate_reuse_minutes",
        "float0",
        0.0,
        "minutes this machine's measured one-thread rate stands for later dilated runs of the same model, "
        "batch size and containers (0: measured for every run, so that D follows the machine the run has)",
        defines_setting=False,
    ),
    Variable(
        "calibration",
        "str",
        None,
        "compute calibration the local containers' CPU follows under dilation (default: the shipped 16-core "
        "one; a file from `trainer calibrate`; linear: vCPUs scale linearly)",
        defines_setting=True,
    ),
    Variable(
        "bandwidth_mbit",
        "float",
        None,
        "egress rate of every peer (or per host in the inventory)",
        defines_setting=True,
    ),
    Variable(
        "latency_ms",
        "float0",
        None,
        "one-way delay added to every peer's cluster traffic, ms (or per host; netem, or the user-space "
        "delay where the kernel has none: docs/network.md)",
        defines_setting=True,
    ),
    Variable(
        "jitter_ms",
        "float0",
        None,
        "standard deviation of that delay, ms (a normal distribution; needs latency_ms)",
        defines_setting=True,
    ),
    Variable(
        "price_per_vcpu_hour",
        "float0",
        None,
        "what a vCPU costs for an hour, on every host (or per host or group in the inventory): the report's "
        "cost of each run (none: no cost; docs/cost.md)",
        defines_setting=False,
    ),
    Variable(
        "price_per_gb_egress",
        "float0",
        None,
        "what a GB (1e9 bytes) a host sends costs, on every host (or per host or group): the report's cost",
        defines_setting=False,
    ),
    Variable(
        "faults",
        "str",
        None,
        "planned faults KIND:HOST@TIME[+DURATION][=RATE], comma-separated",
        defines_setting=True,
    ),
    Variable(
        "churn",
        "str",
        None,
        "Hivemind: peers leave and rejoin at random, mtbf=TIME downtime=TIME [seed=N] [until=TIME]",
        defines_setting=True,
    ),
    Variable(
        "cross_traffic",
        "str",
        None,
        "bulk TCP flows between hosts during the run, SOURCE>TARGET@TIME+DURATION=RATE, comma-separated "
        "(iperf3; docs/network.md)",
        defines_setting=True,
    ),
)

BY_NAME: dict[str, Variable] = {variable.name: variable for variable in VARIABLES}


#: the variables that define a setting: runs equal in all of them are repeats of one setting
SETTING_VARIABLES = tuple(variable.name for variable in VARIABLES if variable.defines_setting)
#: what a variable left unset means for the strategy it applies to (the trainer's own default)
IMPLIED = {
    "zero_stage": ("deepspeed", DEFAULT_ZERO_STAGE),
    "sync_every": ("diloco", DEFAULT_SYNC_EVERY),
    "outer_learning_rate": ("diloco", DEFAULT_OUTER_LEARNING_RATE),
    "outer_momentum": ("diloco", DEFAULT_OUTER_MOMENTUM),
}


#: the variables only one strategy's trainer takes (DeepSpeed's ZeRO stage, DiLoCo's): variable -> strategy
STRATEGY_OF = {
    variable.name: variable.trainers[0]
    for variable in VARIABLES
    if variable.trainers in ((DEEPSPEED,), (DILOCO,))
}


def rule_problems(settings: dict[str, Any]) -> list[tuple[str, str]]:
    """The rules between variables, written once and applied by the playbook (controller/plan.py), the grid
    (controller/grid/vars.py) and the trainer (trainer/config.py) alike, with the same words: (the variable,
    what is wrong) for each rule ``settings`` breaks. A variable absent or None has its default.

    >>> rule_problems({"dataset": "cifar10", "strategy": "diloco", "sync_every": 200, "max_steps": 100})
    [('data_root', 'dataset=cifar10 needs data_root'), \
('sync_every', 'sync_every=200 exceeds max_steps=100: the peers would never sync')]
    >>> rule_problems({"strategy": "hivemind", "zero_stage": 2})
    [('zero_stage', 'zero_stage needs strategy deepspeed (got strategy=hivemind)')]
    >>> rule_problems({"strategy": "ddp", "min_peers": 1, "peers": 4})
    [('min_peers', 'min_peers needs strategy hivemind (a data-parallel world has a fixed size)')]
    """

    def value(name: str) -> Any:
        given = settings.get(name)
        return BY_NAME[name].default if given is None else given

    strategy = value("strategy")
    problems = []
    if value("dataset") in DATASETS_NEEDING_ROOT and not settings.get("data_root"):
        problems.append(("data_root", f"dataset={value('dataset')} needs data_root"))
    for name, only in STRATEGY_OF.items():
        if settings.get(name) is not None and strategy != only:
            problems.append((name, f"{name} needs strategy {only} (got strategy={strategy})"))
    compression = value("compression")
    if compression not in (None, "none") and strategy != "hivemind":
        problems.append(
            ("compression", f"compression={compression} needs strategy hivemind (got strategy={strategy})")
        )
    zero_stage = settings.get("zero_stage")
    if zero_stage is not None and strategy == "deepspeed" and zero_stage not in ZERO_STAGES:
        stages = ", ".join(map(str, ZERO_STAGES))
        problems.append(("zero_stage", f"zero_stage must be one of {stages} (got {zero_stage})"))
    every, steps = settings.get("sync_every"), value("max_steps")
    if every is not None and steps is not None and every > steps:
        problems.append(
            ("sync_every", f"sync_every={every} exceeds max_steps={steps}: the peers would never sync")
        )
    min_peers, peers = value("min_peers"), value("peers")
    if min_peers and strategy != "hivemind":
        problems.append(
            ("min_peers", "min_peers needs strategy hivemind (a data-parallel world has a fixed size)")
        )
    elif min_peers and peers is not None and min_peers > peers:
        problems.append(("min_peers", f"min_peers={min_peers} exceeds peers={peers}"))
    if value("dht_bootstrap") == "monitor" and strategy != "hivemind":
        problems.append(
            (
                "dht_bootstrap",
                "dht_bootstrap=monitor needs strategy hivemind (only Hivemind peers join a DHT)",
            )
        )
    return problems


# ------------------------------------------------------------------------------------------ the kind parser
class KindError(ValueError):
    """A value its kind refuses; the message says the rule ("must be ..."), the caller names the variable."""


def parse_value(kind: Any, value: Any, *, typed: bool = False) -> Any:
    """One value of ``kind``, normalised (ints for counts, floats for rates, bools for flags): the one parser
    behind the playbook's validation (controller/plan.py: values given as text with ``-e``) and the grid's
    (controller/grid/vars.py, ``typed``: values as YAML gave them, so "32" for a count is refused).

    >>> parse_value("int", "8"), parse_value("float", 1, typed=True), parse_value("bool", "yes")
    (8, 1.0, True)
    >>> parse_value("int", 0)
    Traceback (most recent call last):
    ...
    experiment.variables.KindError: must be >= 1 (got 0)
    >>> parse_value("int", "32", typed=True)
    Traceback (most recent call last):
    ...
    experiment.variables.KindError: must be an integer (got '32')
    """
    if kind == "str" and isinstance(value, (list, tuple)) and not typed:  # e.g. faults given as a JSON list
        value = ",".join(str(item) for item in value)
    text = str(value).strip()
    shown = repr(value) if typed else repr(text)
    if typed and kind not in ("str", "dilation") and not isinstance(kind, tuple) and isinstance(value, str):
        value = None  # a string where YAML gives a number or a bool: refused below, as the grid file wrote it
    if kind == "dilation":
        if (value if typed else text) in DILATION_WORDS:
            return value if typed else text
        factor = _as_float(value if typed else text)
        if factor is None or not (math.isfinite(factor) and factor >= 1):
            raise KindError(f"must be auto, off or a factor >= 1 (got {shown})")
        return factor
    if isinstance(kind, tuple):
        if (value if typed else text) not in kind:
            raise KindError(f"must be one of {'|'.join(kind)} (got {shown})")
        return value if typed else text
    if kind in ("int", "int0"):
        number = _as_int(value, text, typed)
        if number is None:
            raise KindError(f"must be an integer (got {shown})")
        low = 1 if kind == "int" else 0
        if number < low:
            raise KindError(f"must be >= {low} (got {number})")
        return number
    if kind in ("float", "float0"):
        number = _as_float(value if typed else text)
        if number is None:
            raise KindError(f"must be a number (got {shown})")
        if kind == "float0" and math.isfinite(number) and number >= 0:
            return number
        if not math.isfinite(number) or number <= 0 or kind == "float0":
            raise KindError(
                f"must be {'a number >= 0' if kind == 'float0' else 'a positive number'} (got {shown})"
            )
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if not typed:
            if text.lower() in ("true", "yes", "1", "on"):
                return True
            if text.lower() in ("false", "no", "0", "off"):
                return False
        raise KindError(f"must be true or false (got {shown})")
    if typed and (not isinstance(value, str) or not value):
        raise KindError(f"must be a non-empty string (got {shown})")
    return value if typed else text


def _as_int(value: Any, text: str, typed: bool) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if typed:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value if isinstance(value, int) else None
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def setting_identity(settings: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A run's setting: every SETTING_VARIABLES value, unset ones as their default (or the strategy's
    implied one), numbers as numbers. Runs with equal identities are repeats of one setting.

    >>> a = setting_identity({"strategy": "deepspeed", "peers": 2, "seed": 1})
    >>> a == setting_identity({"strategy": "deepspeed", "peers": 2, "zero_stage": 2, "seed": 2})
    True
    >>> a == setting_identity({"strategy": "deepspeed", "peers": 2, "zero_stage": 3})
    False
    """
    strategy = settings.get("strategy") or BY_NAME["strategy"].default
    identity = []
    for name in SETTING_VARIABLES:
        value = settings.get(name)
        if value is None:
            implied = IMPLIED.get(name)
            value = implied[1] if implied and implied[0] == strategy else BY_NAME[name].default
        identity.append((name, _number(value)))
    return tuple(identity)


def _number(value: Any) -> Any:
    """1, 1.0 and "1.0" as one value; anything else as it is."""
    if isinstance(value, bool) or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return int(number) if number.is_integer() else number


def _for(trainer: str) -> tuple[str, ...]:
    return tuple(variable.name for variable in VARIABLES if trainer in variable.trainers)


#: settings handed to every trainer, to Hivemind peers, to the data-parallel ranks, to DeepSpeed's and to
#: DiLoCo's only (RunConfig field names)
TRAINER_FIELDS = _for(ALL_TRAINERS)
HIVEMIND_FIELDS = _for(HIVEMIND)
DATA_PARALLEL_FIELDS = _for(DATA_PARALLEL)
DEEPSPEED_FIELDS = _for(DEEPSPEED)
DILOCO_FIELDS = _for(DILOCO)
