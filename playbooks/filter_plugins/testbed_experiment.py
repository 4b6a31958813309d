"""Validation and planning of one experiment (playbooks/validate.yml).

Every playbook variable and the inventory are checked once, on the controller, before any host is touched;
every problem is reported in one message. The variables are those of docs/architecture.md ("Experiment
playbook variables"); extra vars given with ``-e key=value`` arrive as strings, so every value is parsed here.
"""

from __future__ import annotations

import math
import re
from typing import Any

UNSET = "__testbed_unset__"
STRATEGIES = ("hivemind", "baseline")
MODELS = ("resnet18", "smallcnn")
DATASETS = ("fashion-mnist", "synthetic", "cifar10", "imagefolder")
STORAGES = ("cephfs", "local", "nfs")
OPTIMIZERS = ("sgd", "adam")
# No dots: the experiment id is Hivemind's run id, a DHT key prefix that refuses them.
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
DATASET_MOUNT = "/mnt/datasets"
# Locally the study's 16 vCPUs are shared out among the peers (docs/architecture.md).
LOCAL_VCPU_BUDGET = 16

# name: (kind, default). Kinds: int (>= 1), int0 (>= 0), float (> 0), bool, str, or a tuple of choices.
VARIABLES: dict[str, tuple[Any, Any]] = {
    "peers": ("int", 8),
    "strategy": (STRATEGIES, "hivemind"),
    "model": (MODELS, "resnet18"),
    "dataset": (DATASETS, "fashion-mnist"),
    "dataset_storage": (STORAGES, None),
    "data_root": ("str", None),
    "batch_size": ("int", 32),
    "learning_rate": ("float", 0.01),
    "optimizer": (OPTIMIZERS, "sgd"),
    "max_steps": ("int", 1000),
    "seed": ("int0", 0),
    "target_batch_size": ("int", 4096),
    "local_updates": ("bool", False),
    "matchmaking_time": ("float", 5.0),
    "averaging_timeout": ("float", 60.0),
    "vcpus": ("int", None),
    "data_workers": ("int0", 0),
    "eval_every": ("int0", 0),
    "target_loss": ("float", None),
    "experiment_id": ("str", None),
    "force": ("bool", False),
    "start_timeout": ("int", 300),
    "finish_grace": ("float", 30.0),
    "run_timeout": ("int", 3600),
    "progress_interval": ("int", 30),
    "monitoring": ("bool", True),
    "measure_bandwidth": ("bool", True),
    "results_root": ("str", None),
}
# Settings handed to every trainer unchanged (RunConfig field names).
TRAINER_FIELDS = (
    "model",
    "dataset",
    "batch_size",
    "learning_rate",
    "optimizer",
    "max_steps",
    "seed",
    "data_workers",
    "eval_every",
    "target_loss",
)
HIVEMIND_FIELDS = (
    "target_batch_size",
    "local_updates",
    "matchmaking_time",
    "averaging_timeout",
    "finish_grace",
)


def testbed_variable_names(_: Any = None) -> list[str]:
    """The experiment playbook's variables, in documentation order."""
    return list(VARIABLES)


def _parse(name: str, kind: Any, value: Any) -> Any:
    """Parse one value; raises ValueError with the message for the user."""
    text = str(value).strip()
    if isinstance(kind, tuple):
        if text not in kind:
            raise ValueError(f"{name} must be one of {'|'.join(kind)} (got {text!r})")
        return text
    if kind in ("int", "int0"):
        if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"{name} must be an integer (got {text!r})")
        number = int(text)
        low = 1 if kind == "int" else 0
        if number < low:
            raise ValueError(f"{name} must be >= {low} (got {number})")
        return number
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number (got {text!r})") from None
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"{name} must be a positive number (got {text!r})")
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        lowered = text.lower()
        if lowered in ("true", "yes", "1", "on"):
            return True
        if lowered in ("false", "no", "0", "off"):
            return False
        raise ValueError(f"{name} must be true or false (got {text!r})")
    return text


def _parse_all(raw: dict[str, Any], errors: list[str], invalid: set[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name, (kind, default) in VARIABLES.items():
        value = raw.get(name, UNSET)
        if value in (UNSET, None, ""):
            settings[name] = default
            continue
        try:
            settings[name] = _parse(name, kind, value)
        except ValueError as exc:
            errors.append(str(exc))
            settings[name] = default
            invalid.add(name)
    return settings


def _cpuset(index: int, threads: int, host_cores: int) -> str:
    """Cores for the index-th container.

    Consecutive peers start on different cores, so that each peer's pinned threads (the trainer pins itself to
    the first cores it may use) spread over the machine."""
    first = (index * threads) % host_cores
    return ",".join(str((first + k) % host_cores) for k in range(min(threads, host_cores)))


def testbed_experiment(raw: dict[str, Any], inventory: dict[str, Any]) -> dict[str, Any]:
    """Check and complete the experiment's settings; plan the hosts the run uses.

    ``raw``: the playbook variables as given (missing ones as UNSET or absent).
    ``inventory``: ``peers`` (ordered host names), ``hostvars`` (per host: cluster_address, vcpus, memory_mb),
    ``local`` (bool, the embedded local cluster), ``host_cores`` (the controller's cores), ``timestamp``
    (UTC, ``YYYYmmddTHHMMSSZ``), ``inventory_name``.

    Returns ``errors`` (empty when everything is valid), ``settings`` (every variable, typed, with defaults),
    ``experiment_id``, ``hosts`` (the peers used, in order), ``plan`` (per host: address, vcpus, cpus_limit,
    threads, memory_mb, cpuset), ``trainer_settings``, ``warnings``.

    >>> hosts = ["peer-01", "peer-02"]
    >>> size = {"cluster_address": "10.0.0.1", "vcpus": 2, "memory_mb": 2048}
    >>> inv = {"peers": hosts, "local": True, "host_cores": 2, "hostvars": {h: size for h in hosts}}
    >>> result = testbed_experiment({"peers": "2", "model": "smallcnn"}, inv)
    >>> result["errors"], result["hosts"], result["plan"]["peer-02"]["cpus_limit"]
    ([], ['peer-01', 'peer-02'], 1.0)
    >>> testbed_experiment({"peers": "0", "strategy": "ring"}, inv)["errors"]
    ["strategy must be one of hivemind|baseline (got 'ring')", 'peers must be >= 1 (got 0)']
    >>> testbed_experiment({"peers": "3"}, inv)["errors"]
    ['peers=3 but the inventory has only 2 hosts in group peers']
    """
    errors: list[str] = []
    warnings: list[str] = []
    # Report unknown choices before range problems (the order the user reads the variables in).
    invalid: set[str] = set()
    settings = _parse_all(raw, errors, invalid)
    errors.sort(key=lambda e: 0 if "must be one of" in e else 1)
    local = bool(inventory.get("local"))
    inventory_peers = list(inventory.get("peers") or [])
    hostvars = inventory.get("hostvars") or {}
    host_cores = int(inventory.get("host_cores") or 1)

    if not inventory_peers:
        errors.append("the inventory has no hosts in group peers")
    elif "peers" not in invalid and settings["peers"] > len(inventory_peers):
        available = len(inventory_peers)
        errors.append(
            f"peers={settings['peers']} but the inventory has only {available} hosts in group peers"
        )
    if settings["strategy"] == "hivemind" and settings["peers"] < 2:
        warnings.append("a Hivemind run with one peer has nobody to average with")
    if settings["dataset"] in ("cifar10", "imagefolder") and not settings["data_root"]:
        errors.append(f"dataset={settings['dataset']} needs data_root (a directory under {DATASET_MOUNT})")

    if settings["dataset_storage"] is None:
        settings["dataset_storage"] = "cephfs"
    if settings["data_root"] is None and settings["dataset"] != "synthetic":
        settings["data_root"] = f"{DATASET_MOUNT}/{settings['dataset']}"

    count = 1 if settings["strategy"] == "baseline" else settings["peers"]
    hosts = inventory_peers[:count] if not errors else []
    for host in hosts:
        hv = hostvars.get(host) or {}
        for field in ("cluster_address", "vcpus", "memory_mb"):
            if hv.get(field) in (None, ""):
                errors.append(f"inventory host {host} has no {field}")

    if settings["vcpus"] is None:
        if local:
            settings["vcpus"] = max(1, LOCAL_VCPU_BUDGET // max(1, settings["peers"]))
        elif hosts and not errors:
            settings["vcpus"] = min(int(hostvars[h]["vcpus"]) for h in hosts)
    if not local and settings["vcpus"] is not None:
        for host in hosts:
            host_vcpus = hostvars.get(host, {}).get("vcpus")
            if host_vcpus not in (None, "") and settings["vcpus"] > int(host_vcpus):
                errors.append(f"vcpus={settings['vcpus']} exceeds the {host_vcpus} vCPUs of {host}")

    experiment_id = settings["experiment_id"] or "-".join(
        [
            settings["strategy"],
            settings["model"],
            settings["dataset"],
            f"p{count}",
            inventory.get("timestamp", "now"),
        ]
    )
    if not SAFE_ID.match(experiment_id):
        errors.append(f"experiment_id must match {SAFE_ID.pattern} (got {experiment_id!r})")
    settings["experiment_id"] = experiment_id

    plan: dict[str, dict[str, Any]] = {}
    if not errors:
        declared = settings["vcpus"]
        scale = 1.0
        if local and declared * count > host_cores:
            scale = host_cores / (declared * count)
            warnings.append(
                f"the {count} containers ask for {declared * count} CPUs but this machine has {host_cores}: "
                f"each gets --cpus {declared * scale:.2f} instead of {declared}; timings are NOT comparable "
                "with the study's VMs"
            )
        for index, host in enumerate(hosts):
            hv = hostvars[host]
            cpus_limit = round(declared * scale, 3) if local else float(declared)
            threads = max(1, min(declared, math.ceil(cpus_limit), host_cores if local else declared))
            plan[host] = {
                "address": hv["cluster_address"],
                "vcpus": declared,
                "cpus_limit": cpus_limit,
                "threads": threads,
                "memory_mb": int(hv["memory_mb"]),
                "cpuset": _cpuset(index, threads, host_cores) if local else None,
            }
        if local and any(p["threads"] < declared for p in plan.values()):
            warnings.append(
                f"trainer threads reduced from {declared} to {next(iter(plan.values()))['threads']} per peer "
                "(a container cannot use more cores than its CPU limit); experiment.json records both"
            )

    trainer_settings = {name: settings[name] for name in TRAINER_FIELDS if settings[name] is not None}
    if settings["data_root"]:
        trainer_settings["data_root"] = settings["data_root"]
    if settings["strategy"] == "hivemind":
        trainer_settings.update({name: settings[name] for name in HIVEMIND_FIELDS})

    return {
        "errors": errors,
        "warnings": warnings,
        "settings": settings,
        "experiment_id": experiment_id,
        "hosts": hosts,
        "plan": plan,
        "trainer_settings": trainer_settings,
    }


def testbed_host_size(hostvars: Any) -> dict[str, Any]:
    """The inventory variables validation needs from one host's hostvars (missing ones as None)."""
    return {name: hostvars.get(name) for name in ("cluster_address", "vcpus", "memory_mb")}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "testbed_experiment": testbed_experiment,
            "testbed_variable_names": testbed_variable_names,
            "testbed_host_size": testbed_host_size,
        }
