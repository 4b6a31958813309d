"""Validation and planning of one experiment (playbooks/validate.yml).

Every playbook variable and the inventory are checked once, on the controller, before any host is touched;
every problem is reported in one message. The variables are defined in experiment/variables.py; extra vars
given with ``-e key=value`` arrive as strings, so every value is parsed here.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path
from typing import Any

from controller.calibration import DEFAULT as DEFAULT_CALIBRATION
from controller.calibration import CalibrationError, hivemind_model_caveats
from controller.calibration import load as load_calibration
from experiment.machine import changed, this_machine
from experiment.variables import (
    COMPRESSION_PACKAGES,
    DATA_PARALLEL_FIELDS,
    DATA_PARALLEL_STRATEGIES,
    DEEPSPEED_FIELDS,
    DILATION_WORDS,
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
# Cores of this machine left to the local cluster's infrastructure (Ceph, Prometheus, the controller) when the
# peers' containers are scaled down to fit: measured in docs/fair-cpu.md.
LOCAL_INFRA_RESERVE_CORES = 0.25
# The CPU probe before a run (playbooks/cpu.yml) is a check, not an experiment of its own.
MAX_CPU_PROBE_SECONDS = 120
# Per-host link settings: from -e for every peer, or as host variables in the inventory (docs/network.md).
LINK_FIELDS = ("bandwidth_mbit", "latency_ms")
# Prices, per host or from -e for every host, in the host's plan where set: the report's cost (docs/cost.md).
PRICE_FIELDS = ("price_per_vcpu_hour", "price_per_gb_egress")
# A dilated run models the study's cluster network where no bandwidth is given (docs/time-dilation.md).
MODELLED_LINK_MBIT = 1000.0
# Where the controller holds the datasets the local cluster stages (roles/dataset's dataset_local_source): a
# calibrated run's one-thread rate is measured on its own dataset from there.
CONTROLLER_DATASETS = Path("/usr/share/datasets")
# The CPU quota a calibrated container gets above its plan, for its trainer's pacing to hold the plan when
# this machine's CPU runs slower for a while (docs/time-dilation.md, "Held to the calibration": a ResNet18
# step's rate wanders by about 10 % over tens of seconds here).
COMPUTE_HEADROOM = 0.15

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
    bandwidth_mbit, latency_ms, the prices), ``can_delay`` (the local kernel has netem), ``shaped_non_peers``
    (hosts outside group peers that carry link settings), ``monitors`` (the inventory's monitor hosts),
    ``local`` (bool, the embedded local cluster), ``host_cores`` (the controller's cores), ``machine`` (the
    controller's, experiment/machine.py: a controller that is not Linux is refused), ``timestamp`` (UTC,
    ``YYYYmmddTHHMMSSZ``), ``inventory_name``.

    Returns ``errors`` (empty when everything is valid), ``settings`` (every variable, typed, with defaults),
    ``experiment_id``, ``hosts`` (the peers used, in order), ``dht_host`` (the host of the DHT-only bootstrap
    node, None when the first peer bootstraps), ``plan`` (per host: address, vcpus, cpus_limit,
    threads, memory_mb, cpuset (always None: no pinning), bandwidth_mbit, latency_ms), ``trainer_settings``,
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
    # Report unknown choices before range problems (the order the user reads the variables in).
    invalid: set[str] = set()
    settings = _parse_all(raw, errors, invalid)
    errors.sort(key=lambda e: 0 if "must be one of" in e else 1)
    local = bool(inventory.get("local"))
    inventory_peers = list(inventory.get("peers") or [])
    hostvars = inventory.get("hostvars") or {}
    host_cores = int(inventory.get("host_cores") or 1)

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

    count = 1 if settings["strategy"] == "baseline" else settings["peers"]
    hosts = inventory_peers[:count] if not errors else []
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
    if local and not inventory.get("can_delay", False):
        delayed = [host for host in hosts if links[host]["latency_ms"]]
        if delayed:
            errors.append(
                f"latency_ms cannot be emulated on the local cluster: this kernel has no netem (tc qdisc "
                f"netem); {', '.join(delayed)} asked for it. Leave latency_ms out here, or run on VMs whose "
                "kernel has netem"
            )

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
    scale, dilation, compute, local_rate_needed = 1.0, 1.0, None, None
    if not errors:
        total = sum(declared.values())
        # Locally the peers share this machine by CFS quota only, no pinning: equal peers get equal CPU
        # wherever the scheduler runs them, and a reserve stays for Ceph, Prometheus and the controller
        # (docs/fair-cpu.md has the measurements behind this).
        budget = max(host_cores - LOCAL_INFRA_RESERVE_CORES, 0.1 * host_cores)
        if local and settings["time_dilation"] != "off":
            compute, local_rate_needed = _calibrated_compute(
                settings, declared, inventory, budget, warnings, errors
            )
        if compute:
            dilation = _calibrated_dilation(settings["time_dilation"], compute, budget, errors)
        else:
            scale, dilation = _cpu_scale(settings["time_dilation"], local, total, budget, errors)
    if not errors:
        if compute:
            warnings.append(
                f"the {count} containers stand for {total} vCPUs on this machine's {host_cores} cores "
                f"({LOCAL_INFRA_RESERVE_CORES} kept for the infrastructure): each gets the CPU that makes it "
                f"train at its vCPUs' calibrated rate / D ({compute['calibration']}; here one thread trains "
                f"{compute['local_one_thread_rate']:g} samples/s), and every time setting, fault time and "
                f"link is dilated by D = {dilation:.2f}: modelled times are the measured ones / D "
                "(docs/compute-calibration.md)"
            )
            if settings["strategy"] == "hivemind":
                caveats = hivemind_model_caveats(declared, compute["hivemind_compute_factors"])
                warnings += [f"{caveat} (docs/study-scale.md)" for caveat in caveats]
        elif local and scale < 1.0 and dilation > 1.0:
            warnings.append(
                f"the {count} containers stand for {total} vCPUs on this machine's {host_cores} cores "
                f"({LOCAL_INFRA_RESERVE_CORES} kept for the infrastructure): each gets --cpus scaled by "
                f"{scale:.3f}, and every time setting, fault time and link is dilated by D = {dilation:.2f}: "
                "modelled times are the measured ones / D (docs/time-dilation.md)"
            )
        elif local and scale < 1.0:
            warnings.append(
                f"the {count} containers ask for {total} CPUs but this machine has {host_cores} "
                f"({LOCAL_INFRA_RESERVE_CORES} kept for the infrastructure): each gets --cpus scaled by "
                f"{scale:.3f}; with time_dilation=off, timings are NOT comparable with the study's VMs"
            )
        for host in hosts:
            hv = hostvars[host]
            vcpus = declared[host]
            cpus_limit = round(vcpus * scale, 3) if local else float(vcpus)
            threads = max(1, min(vcpus, math.ceil(cpus_limit), host_cores if local else vcpus))
            rates = {}
            if compute:  # one thread at the share of a core that gives the calibrated rate / D
                modelled = compute["modelled_rates"][host]
                local_rate = modelled / dilation
                cpus_limit = round((1 + COMPUTE_HEADROOM) * local_rate / compute["local_one_thread_rate"], 3)
                threads = 1
                rates = {
                    "modelled_samples_per_second": modelled,
                    "local_samples_per_second": round(local_rate, 3),
                }
                if host in compute["hivemind_compute_factors"]:
                    rates["hivemind_compute_factor"] = compute["hivemind_compute_factors"][host]
            plan[host] = {
                "address": hv["cluster_address"],
                "vcpus": vcpus,
                "cpus_limit": cpus_limit,
                "threads": threads,
                "memory_mb": int(hv["memory_mb"]),
                "cpuset": None,
                **rates,
                **_dilated_links(links[host], dilation),
                **prices[host],
            }
        reduced = {f"{p['vcpus']} to {p['threads']}" for p in plan.values() if p["threads"] < p["vcpus"]}
        if local and reduced and not compute:
            warnings.append(
                f"trainer threads reduced from {', '.join(sorted(reduced))} per peer (a container cannot use "
                "more cores than its CPU limit); experiment.json records both"
            )

    trainer_settings = {name: settings[name] for name in TRAINER_FIELDS if settings[name] is not None}
    trainer_settings["time_dilation"] = dilation
    if compute:  # each step paced to the plan's CPU speed, the quota's headroom beside it (trainer/loop.py)
        trainer_settings["hold_rate"] = compute["local_one_thread_rate"]
        trainer_settings["hold_headroom"] = COMPUTE_HEADROOM
    if settings["data_root"]:
        trainer_settings["data_root"] = settings["data_root"]
    if settings["strategy"] == "hivemind":
        trainer_settings.update({name: settings[name] for name in HIVEMIND_FIELDS})
    elif settings["strategy"] in DATA_PARALLEL_STRATEGIES:
        trainer_settings.update({name: settings[name] for name in DATA_PARALLEL_FIELDS})
    if settings["strategy"] == "deepspeed":
        trainer_settings.update(
            {name: settings[name] for name in DEEPSPEED_FIELDS if settings[name] is not None}
        )
    if settings["strategy"] == "diloco":
        given = {name: settings[name] for name in DILOCO_FIELDS if settings[name] is not None}
        trainer_settings.update(given)

    return {
        "errors": errors,
        "warnings": warnings,
        "settings": settings,
        "experiment_id": experiment_id,
        "hosts": hosts,
        # the role that runs the trainer, and whether the peers talk (playbooks/run.yml, network.yml)
        "trainer_role": TRAINER_ROLES.get(settings["strategy"]),
        "communicates": settings["strategy"] not in ("baseline", "solo"),
        "dht_host": dht_host if not errors else None,
        "lighthouse_host": lighthouse_host if not errors else None,
        "plan": plan,
        "time_dilation": dilation,
        # run_timeout is the modelled machine's, like every other time setting: the playbook waits D times it
        "run_timeout_seconds": math.ceil(settings["run_timeout"] * dilation),
        "compute": compute if not errors else None,
        "local_rate_needed": local_rate_needed if not errors else None,
        "trainer_settings": trainer_settings,
    }


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
    """The host of torchft's Lighthouse (the first monitor host) for a DiLoCo run; DiLoCo's settings are
    refused with any other strategy.

    >>> inv = {"monitors": ["monitor"]}
    >>> errors = []
    >>> _lighthouse_host({"strategy": "diloco", "sync_every": 10, "max_steps": 100}, inv, set(), errors)
    'monitor'
    >>> _lighthouse_host({"strategy": "diloco", "outer_momentum": 1.0}, {}, set(), errors)
    >>> errors
    ['outer_momentum must be below 1 (got 1)', \
"strategy=diloco needs torchft's Lighthouse on a host in group monitor, and the inventory has none"]
    """
    strategy = settings["strategy"]
    if strategy != "diloco":
        for name in DILOCO_FIELDS:
            if settings.get(name) is not None:
                errors.append(f"{name} needs strategy diloco (got strategy={strategy})")
        return None
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


def _calibrated_compute(
    settings: dict[str, Any],
    declared: dict[str, int],
    inventory: dict[str, Any],
    budget: float,
    warnings: list[str],
    errors: list[str],
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the calibrated compute of a dilated local run, the local rate still to measure), or None for either.

    The compute: the calibration, each host's modelled samples/s (its vCPUs' calibrated rate) and what one
    core of this machine trains per second when as many one-thread processes as the run has containers share
    it by CPU quota, read from ``inventory["local_rate_dir"]`` (playbooks/validate.yml measures it there with
    `trainer calibrate --threads 1 --share N:CORES` when it is missing: then the second is set). None where
    the run is modelled linearly: ``calibration=linear``, or no rate for the model, batch size or a host's
    vCPUs.
    """
    given = settings["calibration"]
    if given == "linear":
        return None, None
    try:
        calibration = load_calibration(given or DEFAULT_CALIBRATION)
    except CalibrationError as exc:
        errors.append(f"calibration: {exc}")
        return None, None
    model, batch_size = settings["model"], settings["batch_size"]
    modelled = {host: calibration.rate(model, batch_size, vcpus) for host, vcpus in declared.items()}
    missing = sorted({declared[host] for host, rate in modelled.items() if rate is None})
    if missing:
        sizes = ", ".join(str(v) for v in missing)
        warnings.append(
            f"the calibration has no rate for {model} at batch size {batch_size} with {sizes} vCPUs "
            f"({calibration.describe()}): threads are modelled as if they scaled linearly "
            "(docs/compute-calibration.md)"
        )
        return None, None
    # a Hivemind peer computes beside its own processes: the calibration's factor where it has one
    factors: dict[str, float] = {}
    if settings["strategy"] == "hivemind":
        found = {
            host: calibration.hivemind_compute_factor(model, batch_size, v) for host, v in declared.items()
        }
        factors = {host: factor for host, factor in found.items() if factor is not None}
        modelled = {host: rate * factors.get(host, 1.0) for host, rate in modelled.items()}
    directory = inventory.get("local_rate_dir")
    if not directory:
        return None, None
    containers = len(declared)
    # trained on the run's dataset where the controller holds it (the rate depends on the data), else on
    # synthetic images
    dataset, data_root = settings["dataset"], None
    if dataset != "synthetic":
        held = Path(inventory.get("datasets_dir") or CONTROLLER_DATASETS) / dataset
        dataset, data_root = (dataset, str(held)) if held.is_dir() else ("synthetic", None)
    data = "" if dataset == "synthetic" else f"-{dataset}"
    local_file = Path(directory) / f"{model}-bs{batch_size}-n{containers}{data}.json"
    share = round(min(1.0, budget / containers), 3)
    steps = max(10, 1280 // batch_size)  # about 1280 samples per process: past the first steps' warm-up
    needed = {"model": model, "batch_size": batch_size, "file": str(local_file), "steps": steps}
    needed.update(share=f"{containers}:{share}", dataset=dataset, data_root=data_root)
    if not local_file.exists():
        return None, {**needed, "why": "not measured yet"}
    try:
        document = json.loads(local_file.read_text())
        load_calibration(local_file).speedup(model, batch_size, 1)  # one clear error where it has no rate
        row = document["rates"][0]
        one_thread = float(row.get("samples_per_core_second") or row["samples_per_second"])
    except (CalibrationError, KeyError, IndexError, TypeError, ValueError) as exc:
        errors.append(f"this machine's one-thread rate: {exc} (delete {local_file} to measure it again)")
        return None, None
    # measured on another machine, core count or torch: no longer this machine's rate
    stale = changed(document.get("measured_on", {}), inventory.get("machine") or {})
    if stale:
        return None, {**needed, "why": f"measured on another machine ({', '.join(stale)})"}
    measured_at = (document.get("measured_on") or {}).get("measured_at")
    fresh = inventory.get("local_rate_fresh") in (True, "True", "true")
    if not fresh:
        why = _too_old(measured_at, inventory.get("now"), float(settings["local_rate_reuse_minutes"] or 0))
        if why:
            return None, {**needed, "why": why}
    compute = {
        "calibration": calibration.describe(),
        "calibration_file": calibration.path,
        "model": model,
        "batch_size": batch_size,
        "local_one_thread_rate": one_thread,
        "local_rate_file": str(local_file),
        "local_rate_measured_at": measured_at,
        "local_rate_dataset": dataset,
        "headroom": COMPUTE_HEADROOM,
        "local_rate_reused": not fresh,
        "modelled_rates": modelled,
        "hivemind_compute_factors": factors,
    }
    return compute, None


def _too_old(measured_at: str | None, now: str | None, reuse_minutes: float) -> str | None:
    """Why a one-thread rate measured at ``measured_at`` does not stand for a run planned at ``now`` (both ISO
    8601), or None where it does: it stands for ``reuse_minutes`` (0: for the run that measured it only).

    >>> _too_old("2026-12-07T08:00:00+00:00", "2026-12-07T08:20:00+00:00", 30) is None
    True
    >>> _too_old("2026-12-07T08:00:00+00:00", "2026-12-07T08:20:00+00:00", 0)
    'measured for every run (local_rate_reuse_minutes=0)'
    >>> _too_old(None, "2026-12-07T08:20:00+00:00", 30)
    'reused for 30 minutes (local_rate_reuse_minutes), and this one says not when'
    >>> _too_old("2026-12-07T08:00:00+00:00", "2026-12-07T08:20:00", 30) is None  # no offset: UTC
    True
    >>> _too_old("2026-12-07T07:00:00+00:00", "2026-12-07T08:20:00+00:00", 30)
    'measured 80 minutes ago, more than local_rate_reuse_minutes=30'
    """
    if reuse_minutes <= 0:
        return "measured for every run (local_rate_reuse_minutes=0)"
    try:
        then, at = (datetime.datetime.fromisoformat(str(moment)) for moment in (measured_at, now))
        utc = datetime.UTC  # a moment without its offset is UTC (Ansible's now(utc=true))
        age = at.replace(tzinfo=at.tzinfo or utc) - then.replace(tzinfo=then.tzinfo or utc)
    except ValueError:
        return f"reused for {reuse_minutes:g} minutes (local_rate_reuse_minutes), and this one says not when"
    minutes = age.total_seconds() / 60
    if not 0 <= minutes <= reuse_minutes:
        return f"measured {minutes:.0f} minutes ago, more than local_rate_reuse_minutes={reuse_minutes:g}"
    return None


def _calibrated_dilation(
    given: str | float, compute: dict[str, Any], budget: float, errors: list[str]
) -> float:
    """D of a calibrated run: each container runs one thread at the share of a core that makes it train at
    its modelled rate / D, with COMPUTE_HEADROOM more for the pacing, so every share must be at most one core
    and all must fit the budget; auto takes the smallest such D (at least 1).

    >>> compute = {"modelled_rates": {"a": 246.0, "b": 246.0}, "local_one_thread_rate": 100.0}
    >>> round(_calibrated_dilation("auto", compute, 1.75, []), 3)  # two 2-vCPU VMs: 1.15 x 492 / 175
    3.233
    >>> round(_calibrated_dilation("auto", {**compute, "modelled_rates": {"a": 712.0}}, 1.75, []), 2)
    8.19
    >>> errors = []; _ = _calibrated_dilation(2.0, compute, 1.75, errors); print(errors[0].split(": ")[-1])
    use a factor >= 3.23 (or auto)
    """
    rates = list(compute["modelled_rates"].values())
    one_thread = compute["local_one_thread_rate"]
    room = 1 + COMPUTE_HEADROOM
    smallest = max(1.0, room * max(rates) / one_thread, room * sum(rates) / (budget * one_thread))
    if given == "auto":
        return smallest
    if given < smallest * (1 - 1e-9):
        errors.append(
            f"time_dilation={given:g} would ask this machine for more than it has: each container runs one "
            f"thread at its modelled rate / D with {COMPUTE_HEADROOM:.0%} headroom ({one_thread:g} samples/s "
            f"here at one thread, the {budget:g} cores of the budget): use a factor >= {smallest:.2f} "
            "(or auto)"
        )
    return float(given)


def _cpu_scale(
    given: str | float, local: bool, total: float, budget: float, errors: list[str]
) -> tuple[float, float]:
    """(the share of its vCPUs each local container gets, the time dilation D) for ``time_dilation``.

    auto: the peers' vCPUs fitted into the budget, D = 1 / that share (1 on VMs); off: fitted, D = 1 (no
    dilation: today's distorted model); a factor: each peer gets vcpus / factor cores, which must fit.

    >>> _cpu_scale("auto", True, 16, 1.75, []), _cpu_scale("off", True, 16, 1.75, [])
    ((0.109375, 9.142857142857142), (0.109375, 1.0))
    >>> _cpu_scale(10.0, True, 16, 1.75, []), _cpu_scale("auto", False, 16, 1.75, [])
    ((0.1, 10.0), (1.0, 1.0))
    >>> errors = []; _ = _cpu_scale(4.0, True, 16, 1.75, errors); print(errors[0].split(": ")[1])
    use a factor >= 9.14 (or auto)
    """
    fitted = min(1.0, budget / total)
    if not local:
        if given not in DILATION_WORDS and given != 1:
            errors.append(f"time_dilation={given:g} needs the local cluster: a VM runs at its own speed")
        return 1.0, 1.0
    if given == "off":
        return fitted, 1.0
    if given == "auto":
        return fitted, 1.0 / fitted
    if total / given > budget * (1 + 1e-9):
        errors.append(
            f"time_dilation={given:g} gives the peers {total / given:g} cores of this machine, more than its "
            f"{budget:g} for them: use a factor >= {total / budget:.2f} (or auto)"
        )
    return 1.0 / given, float(given)


def _dilated_links(links: dict[str, float | None], dilation: float) -> dict[str, float | None]:
    """A host's link as applied, with the modelled link beside it when dilated: the rate / D (the modelled
    default 1 Gbit/s where none is given), the delay x D."""
    if dilation == 1.0:
        return dict(links)
    modelled_rate = links["bandwidth_mbit"] or MODELLED_LINK_MBIT
    return {
        "bandwidth_mbit": round(modelled_rate / dilation, 3),
        "latency_ms": None if links["latency_ms"] is None else round(links["latency_ms"] * dilation, 3),
        "modelled_bandwidth_mbit": modelled_rate,
        "modelled_latency_ms": links["latency_ms"],
    }


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
