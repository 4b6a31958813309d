"""Validation and planning of one experiment (playbooks/validate.yml).

Every playbook variable and the inventory are checked once, on the controller, before any host is touched;
every problem is reported in one message. The variables are defined in experiment/variables.py; extra vars
given with ``-e key=value`` arrive as strings, so every value is parsed here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from controller.sizing import Sizing, host_plans, size_run
from experiment.machine import this_machine
from experiment.variables import (
    COMPRESSION_PACKAGES,
    DATA_PARALLEL_FIELDS,
    DATA_PARALLEL_STRATEGIES,
    DEEPSPEED_FIELDS,
    DILOCO_FIELDS,
    HIVEMIND_FIELDS,
    TRAINER_FIELDS,
    TRAINER_ROLES,
    KindError,
    parse_value,
    rule_problems,
)
from experiment.variables import VARIABLES as DEFINITION

UNSET = "__testbed_unset__"
# No dots: the experiment id is Hivemind's run id, a DHT key prefix that refuses them.
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
DATASET_MOUNT = "/mnt/datasets"
#: what the trainer role installs on every host (a compression that needs more is refused before the run)
NODE_REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements" / "node.txt"
# Locally the study's 16 vCPUs are shared out among the peers (docs/architecture.md).
LOCAL_VCPU_BUDGET = 16
# The CPU probe before a run (playbooks/cpu.yml) is a check, not an experiment of its own.
MAX_CPU_PROBE_SECONDS = 120
# Per-host link settings: from -e for every peer, or as host variables in the inventory (docs/network.md).
LINK_FIELDS = ("bandwidth_mbit", "latency_ms", "jitter_ms")
# Prices, per host or from -e for every host, in the host's plan where set: the report's cost (docs/cost.md).
PRICE_FIELDS = ("price_per_vcpu_hour", "price_per_gb_egress")

# name: (kind, default), from the one definition (experiment/variables.py)
VARIABLES: dict[str, tuple[Any, Any]] = {v.name: (v.kind, v.default) for v in DEFINITION}


def testbed_variable_names(_: Any = None) -> list[str]:
    """The experiment playbook's variables, in documentation order."""
    return list(VARIABLES)


def _parse(name: str, kind: Any, value: Any) -> Any:
    """Parse one value given as text (``-e``); raises ValueError with the message for the user (the one kind
    parser: experiment/variables.py ``parse_value``)."""
    try:
        return parse_value(kind, value)
    except KindError as error:
        raise ValueError(f"{name} {error}") from None


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


def _host_links(host: str, hv: dict[str, Any], errors: list[str]) -> dict[str, float | None]:
    """A host's link settings (None: unshaped), each problem reported with the host's name."""
    links: dict[str, float | None] = {}
    for name in LINK_FIELDS:
        value = hv.get(name)
        links[name] = None
        if value in (None, "", UNSET):
            continue
        try:
            links[name] = _parse(name, VARIABLES[name][0], value)
        except ValueError as exc:
            errors.append(f"{host}: {exc}")
    return links


def _host_prices(host: str, hv: dict[str, Any], raw: dict[str, Any], errors: list[str]) -> dict[str, float]:
    """A host's prices that are set (none: the report shows no cost), each problem with the host's name (a
    bad ``-e`` value, which every host then has, is reported once, with the settings)."""
    prices: dict[str, float] = {}
    for name in PRICE_FIELDS:
        value = hv.get(name)
        if value in (None, "", UNSET):
            continue
        try:
            prices[name] = _parse(name, VARIABLES[name][0], value)
        except ValueError as exc:
            if value != raw.get(name):
                errors.append(f"{host}: {exc}")
    return prices


def controller_not_linux(system: str) -> str:
    """The one message for a controller that does not run Linux.

    >>> controller_not_linux("Darwin")[:62]
    'the controller (the machine that runs ansible-playbook) runs D'
    """
    return (
        f"the controller (the machine that runs ansible-playbook) runs {system}, not Linux: it resolves the "
        "hosts' Linux wheels with its own pip, measures its own cores and runs the local cluster's podman; "
        "run the playbook from a Linux machine, VM or container (docs/real-vms.md)"
    )


def testbed_experiment(raw: dict[str, Any], inventory: dict[str, Any]) -> dict[str, Any]:
    """Check and complete the experiment's settings; plan the hosts the run uses.

    ``raw``: the playbook variables as given (missing ones as UNSET or absent).
    ``inventory``: ``peers`` (ordered host names), ``hostvars`` (per host: cluster_address, vcpus, memory_mb,
    bandwidth_mbit, latency_ms, jitter_ms, the prices), ``shaped_non_peers``
    (hosts outside group peers that carry link settings), ``monitors`` (the inventory's monitor hosts),
    ``local`` (bool, the embedded local cluster), ``host_cores`` (the controller's cores), ``machine`` (the
    controller's, experiment/machine.py: a controller that is not Linux is refused), ``timestamp`` (UTC,
    ``YYYYmmddTHHMMSSZ``), ``inventory_name``.

    Returns ``errors`` (empty when everything is valid), ``settings`` (every variable, typed, with defaults),
    ``experiment_id``, ``hosts`` (the peers used, in order), ``dht_host`` (the host of the DHT-only bootstrap
    node, None when the first peer bootstraps), ``plan`` (per host: address, vcpus, cpus_limit,
    threads, memory_mb, cpuset (always None: no pinning), bandwidth_mbit, latency_ms, jitter_ms),
    ``trainer_settings``,
    ``warnings``.

    >>> hosts = ["peer-01", "peer-02"]
    >>> size = {"cluster_address": "10.0.0.1", "vcpus": 2, "memory_mb": 2048}
    >>> inv = {"peers": hosts, "local": True, "host_cores": 2, "hostvars": {h: size for h in hosts}}
    >>> result = testbed_experiment({"peers": "2", "model": "smallcnn"}, inv)
    >>> result["errors"], result["hosts"], result["plan"]["peer-02"]["cpus_limit"]
    ([], ['peer-01', 'peer-02'], 0.875)
    >>> for error in testbed_experiment({"peers": "0", "strategy": "ring"}, inv)["errors"]:
    ...     print(error)
    strategy must be one of hivemind|baseline|ddp|zero|fsdp|deepspeed|diloco|solo (got 'ring')
    peers must be >= 1 (got 0)
    >>> testbed_experiment({"peers": "3"}, inv)["errors"]
    ['peers=3 but the inventory has only 2 hosts in group peers']
    """
    errors: list[str] = []
    warnings: list[str] = []
    settings, roles = _validate(raw, inventory, errors, warnings)
    hosts, declared, links, prices = _place(settings, raw, inventory, errors)
    experiment_id = _experiment_id(settings, _host_count(settings), inventory, errors)
    sizing = size_run(settings, declared, inventory, errors, warnings) if not errors else Sizing()
    plan = (
        host_plans(settings, hosts, declared, links, prices, sizing, inventory, warnings)
        if not errors
        else {}
    )
    dilation, compute = sizing.dilation, sizing.compute
    return {
        "errors": errors,
        "warnings": warnings,
        "settings": settings,
        "experiment_id": experiment_id,
        "hosts": hosts,
        # the role that runs the trainer, and whether the peers talk (playbooks/run.yml, network.yml)
        "trainer_role": TRAINER_ROLES.get(settings["strategy"]),
        "communicates": settings["strategy"] not in ("baseline", "solo"),
        "dht_host": roles["dht_host"] if not errors else None,
        "lighthouse_host": roles["lighthouse_host"] if not errors else None,
        "plan": plan,
        "time_dilation": dilation,
        # run_timeout is the modelled machine's, like every other time setting: the playbook waits D times it
        "run_timeout_seconds": math.ceil(settings["run_timeout"] * dilation),
        "compute": compute if not errors else None,
        "local_rate_needed": sizing.local_rate_needed if not errors else None,
        "trainer_settings": trainer_settings(settings, dilation, compute),
    }


def _host_count(settings: dict[str, Any]) -> int:
    """The hosts a run uses: one for a baseline, every peer otherwise."""
    return 1 if settings["strategy"] == "baseline" else settings["peers"]


def _validate(
    raw: dict[str, Any], inventory: dict[str, Any], errors: list[str], warnings: list[str]
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """The settings parsed and checked against each other and the inventory's groups, with the defaults that
    depend on others filled in; the hosts of the DHT-only node and of the Lighthouse (None: none).

    >>> errors, warnings = [], []
    >>> raw = {"strategy": "ddp", "min_peers": "1"}
    >>> settings, roles = _validate(raw, {"peers": ["p1"]}, errors, warnings)
    >>> errors
    ['peers=8 but the inventory has only 1 hosts in group peers', \
'min_peers needs strategy hivemind (a data-parallel world has a fixed size)']
    >>> settings["dataset_storage"], settings["data_root"], roles
    ('cephfs', '/mnt/datasets/fashion-mnist', {'dht_host': None, 'lighthouse_host': None})
    """
    # Report unknown choices before range problems (the order the user reads the variables in).
    invalid: set[str] = set()
    settings = _parse_all(raw, errors, invalid)
    errors.sort(key=lambda e: 0 if "must be one of" in e else 1)
    inventory_peers = list(inventory.get("peers") or [])
    system = (inventory.get("machine") or {}).get("system")
    if system and system != "Linux":
        errors.insert(0, controller_not_linux(system))
    if not inventory_peers:
        errors.append("the inventory has no hosts in group peers")
    elif "peers" not in invalid and settings["peers"] > len(inventory_peers):
        available = len(inventory_peers)
        errors.append(
            f"peers={settings['peers']} but the inventory has only {available} hosts in group peers"
        )
    if "compression" not in invalid:
        _check_compression(settings, errors)
    # the rules between variables (experiment/variables.py), where the variables they read parsed
    reads = {
        "data_root": {"dataset"},
        "sync_every": {"max_steps", "strategy"},
        "min_peers": {"peers", "strategy"},
    }
    for name, problem in rule_problems(settings):
        if name in invalid or invalid & reads.get(name, {"strategy"}):
            continue
        errors.append(f"{problem} (a directory under {DATASET_MOUNT})" if name == "data_root" else problem)
    lighthouse_host = _lighthouse_host(settings, inventory, invalid, errors)
    if settings["cpu_probe_seconds"] > MAX_CPU_PROBE_SECONDS:
        too_long = settings["cpu_probe_seconds"]
        errors.append(f"cpu_probe_seconds must be at most {MAX_CPU_PROBE_SECONDS} (got {too_long})")
    if settings["strategy"] == "hivemind" and settings["peers"] < 2:
        warnings.append("a Hivemind run with one peer has nobody to average with")
    dht_host = None
    if settings["dht_bootstrap"] == "monitor" and settings["strategy"] == "hivemind":
        monitors = list(inventory.get("monitors") or [])
        if not monitors:
            errors.append("dht_bootstrap=monitor but the inventory has no host in group monitor")
        else:
            dht_host = monitors[0]

    if settings["dataset_storage"] is None:
        settings["dataset_storage"] = "cephfs"
    if settings["data_root"] is None and settings["dataset"] != "synthetic":
        settings["data_root"] = f"{DATASET_MOUNT}/{settings['dataset']}"
    return settings, {"dht_host": dht_host, "lighthouse_host": lighthouse_host}


def _place(
    settings: dict[str, Any], raw: dict[str, Any], inventory: dict[str, Any], errors: list[str]
) -> tuple[list[str], dict[str, int], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The hosts the run uses (the first peers of the inventory, none where the settings are wrong), the
    vCPUs each stands for, its link settings and its prices; completes ``settings["vcpus"]``.

    >>> size = {"cluster_address": "10.0.0.1", "vcpus": 2, "memory_mb": 2048}
    >>> inv = {"peers": ["p1", "p2", "p3"], "hostvars": dict.fromkeys(["p1", "p2", "p3"], size)}
    >>> settings = {"strategy": "hivemind", "peers": 2, "vcpus": None}
    >>> hosts, declared, links, prices = _place(settings, {}, inv, [])
    >>> hosts, declared, settings["vcpus"]
    (['p1', 'p2'], {'p1': 2, 'p2': 2}, 2)
    >>> errors = []
    >>> _place({"strategy": "hivemind", "peers": 1, "vcpus": 4}, {}, inv, errors)[0], errors
    (['p1'], ['vcpus=4 exceeds the 2 vCPUs of p1'])
    """
    local = bool(inventory.get("local"))
    inventory_peers = list(inventory.get("peers") or [])
    hostvars = inventory.get("hostvars") or {}
    hosts = inventory_peers[: _host_count(settings)] if not errors else []
    # locally a host without its own vcpus gets the study's budget shared out; a VM must say its size
    required = ("cluster_address", "memory_mb") if local else ("cluster_address", "vcpus", "memory_mb")
    for host in hosts:
        hv = hostvars.get(host) or {}
        for field in required:
            if hv.get(field) in (None, ""):
                errors.append(f"inventory host {host} has no {field}")

    explicit_vcpus = settings["vcpus"]
    local_default = max(1, LOCAL_VCPU_BUDGET // max(1, settings["peers"]))
    declared: dict[str, int] = {}
    for host in hosts:
        host_vcpus = (hostvars.get(host) or {}).get("vcpus")
        if explicit_vcpus is not None:
            declared[host] = explicit_vcpus
            if not local and host_vcpus not in (None, "") and explicit_vcpus > int(host_vcpus):
                errors.append(f"vcpus={explicit_vcpus} exceeds the {host_vcpus} vCPUs of {host}")
        elif host_vcpus not in (None, ""):
            try:
                declared[host] = _parse("vcpus", "int", host_vcpus)
            except ValueError as exc:
                errors.append(f"{host}: {exc}")
        else:
            declared[host] = local_default
    if explicit_vcpus is None and declared:
        sizes = set(declared.values())
        # equal peers: one number; heterogeneous peers: the smallest, and experiment.json's hosts say each
        settings["vcpus"] = min(sizes) if len(sizes) > 1 else sizes.pop()

    links = {host: _host_links(host, hostvars.get(host) or {}, errors) for host in hosts}
    prices = {host: _host_prices(host, hostvars.get(host) or {}, raw, errors) for host in hosts}
    # a -e value reaches every host, the monitor too: only host variables outside group peers are mistakes
    given_for_all = any(raw.get(name) not in (None, "", UNSET) for name in LINK_FIELDS)
    for host in [] if given_for_all else inventory.get("shaped_non_peers") or []:
        errors.append(f"{host} has link settings ({'/'.join(LINK_FIELDS)}) but is not in group peers")
    jittered = [host for host in hosts if links[host]["jitter_ms"] and not links[host]["latency_ms"]]
    if jittered:
        errors.append(f"jitter_ms needs a latency_ms above 0 on the same host ({', '.join(jittered)})")
    return hosts, declared, links, prices


def _experiment_id(settings: dict[str, Any], count: int, inventory: dict[str, Any], errors: list[str]) -> str:
    """The run's id: the one given, or strategy, model, dataset, hosts and the time; checked and stored in
    ``settings``.

    >>> settings = {"experiment_id": None, "strategy": "baseline", "model": "smallcnn"}
    >>> settings["dataset"] = "synthetic"
    >>> _experiment_id(settings, 1, {"timestamp": "20261207T000000Z"}, [])
    'baseline-smallcnn-synthetic-p1-20261207T000000Z'
    """
    parts = [settings["strategy"], settings["model"], settings["dataset"], f"p{count}"]
    experiment_id = settings["experiment_id"] or "-".join([*parts, inventory.get("timestamp", "now")])
    if not SAFE_ID.match(experiment_id):
        errors.append(f"experiment_id must match {SAFE_ID.pattern} (got {experiment_id!r})")
    settings["experiment_id"] = experiment_id
    return experiment_id


def trainer_settings(
    settings: dict[str, Any], dilation: float, compute: dict[str, Any] | None
) -> dict[str, Any]:
    """What every trainer of the run is given: the variables it takes (its strategy's among them), D, and
    where calibrated the rate its steps are paced to (trainer/loop.py).

    >>> settings = {name: None for name in TRAINER_FIELDS + HIVEMIND_FIELDS}
    >>> settings.update(strategy="baseline", model="smallcnn", data_root=None)
    >>> trainer_settings(settings, 1.0, None)
    {'model': 'smallcnn', 'time_dilation': 1.0}
    """
    given = {name: settings[name] for name in TRAINER_FIELDS if settings[name] is not None}
    given["time_dilation"] = dilation
    if compute:  # each step paced to the plan's CPU speed, the quota's headroom beside it (trainer/loop.py)
        given["hold_rate"] = compute["local_one_thread_rate"]
        given["hold_headroom"] = compute["headroom"]
    if settings["data_root"]:
        given["data_root"] = settings["data_root"]
    if settings["strategy"] == "hivemind":
        given.update({name: settings[name] for name in HIVEMIND_FIELDS})
    elif settings["strategy"] in DATA_PARALLEL_STRATEGIES:
        given.update({name: settings[name] for name in DATA_PARALLEL_FIELDS})
    if settings["strategy"] == "deepspeed":
        given.update({name: settings[name] for name in DEEPSPEED_FIELDS if settings[name] is not None})
    if settings["strategy"] == "diloco":
        given.update({name: settings[name] for name in DILOCO_FIELDS if settings[name] is not None})
    return given


def _check_compression(settings: dict[str, Any], errors: list[str]) -> None:
    """A compression that needs a package the hosts do not install (requirements/node.txt) is refused here,
    not by every trainer at its start (that it is Hivemind's is a rule between variables)."""
    compression = settings["compression"]
    if compression in (None, "none"):
        return
    package = COMPRESSION_PACKAGES.get(compression)
    if package and not _requires(package):
        errors.append(
            f"compression={compression} needs {package}, which the hosts do not install: add it to "
            f"requirements/node.txt (pinned) or pick another compression"
        )


def _requires(package: str) -> bool:
    """Whether requirements/node.txt names ``package``."""
    names = (
        re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0]
        for line in NODE_REQUIREMENTS.read_text().splitlines()
    )
    return package.lower() in (
        name.lower().replace("_", "-") for name in names if name and not name.startswith("#")
    )


def _lighthouse_host(
    settings: dict[str, Any], inventory: dict[str, Any], invalid: set[str], errors: list[str]
) -> str | None:
    """The host of torchft's Lighthouse (the first monitor host) for a DiLoCo run.

    >>> inv = {"monitors": ["monitor"]}
    >>> errors = []
    >>> _lighthouse_host({"strategy": "diloco", "sync_every": 10, "max_steps": 100}, inv, set(), errors)
    'monitor'
    >>> _lighthouse_host({"strategy": "diloco", "outer_momentum": 1.0}, {}, set(), errors)
    >>> errors
    ['outer_momentum must be below 1 (got 1)', \
"strategy=diloco needs torchft's Lighthouse on a host in group monitor, and the inventory has none"]
    """
    if settings["strategy"] != "diloco":
        return None  # DiLoCo's settings with another strategy: a rule between variables (rule_problems)
    momentum = settings.get("outer_momentum")
    if momentum is not None and momentum >= 1:
        errors.append(f"outer_momentum must be below 1 (got {momentum:g})")
    monitors = list(inventory.get("monitors") or [])
    if not monitors:
        errors.append(
            "strategy=diloco needs torchft's Lighthouse on a host in group monitor, and the inventory "
            "has none"
        )
        return None
    return monitors[0]


def testbed_host_size(hostvars: Any) -> dict[str, Any]:
    """The inventory variables validation needs from one host's hostvars (missing ones as None)."""
    names = ("cluster_address", "vcpus", "memory_mb", *LINK_FIELDS, *PRICE_FIELDS)
    return {name: hostvars.get(name) for name in names}


def testbed_shaped_hosts(hosts: list[str], hostvars: Any, fields: Any = LINK_FIELDS) -> list[str]:
    """The hosts that carry any of the link settings ``fields`` with a value other than none/0."""
    return [h for h in hosts if any(hostvars[h].get(name) not in (None, "", 0, "0") for name in fields)]


def testbed_this_machine(_: Any = None) -> dict[str, Any]:
    """The controller's cores, CPU model and torch version (validate.yml's ``inventory["machine"]``): a local
    rate measured on another is measured again."""
    return this_machine()
