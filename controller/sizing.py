"""How a run's hosts are sized on the machine that runs them (controller/plan.py's third step).

VMs run at their own size. On the local cluster the containers share this machine: undilated, each gets
its vCPUs' CPU scaled to fit the cores left to the peers; dilated (``time_dilation``), a calibrated run
gives each container the CPU that makes it train at its vCPUs' calibrated rate / D, D the smallest factor
at which all fit (docs/compute-calibration.md, docs/time-dilation.md); an uncalibrated one scales linearly.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.calibration import DEFAULT as DEFAULT_CALIBRATION
from controller.calibration import CalibrationError, hivemind_model_caveats
from controller.calibration import load as load_calibration
from experiment.machine import changed
from experiment.variables import DILATION_WORDS

# Cores of this machine left to the local cluster's infrastructure (Ceph, Prometheus, the controller) when the
# peers' containers are scaled down to fit: measured in docs/fair-cpu.md.
LOCAL_INFRA_RESERVE_CORES = 0.25
# A dilated run models the study's cluster network where no bandwidth is given (docs/time-dilation.md).
MODELLED_LINK_MBIT = 1000.0
# Where the controller holds the datasets the local cluster stages (roles/dataset's dataset_local_source): a
# calibrated run's one-thread rate is measured on its own dataset from there.
CONTROLLER_DATASETS = Path("/usr/share/datasets")
# The CPU quota a calibrated container gets above its plan, for its trainer's pacing to hold the plan when
# this machine's CPU runs slower for a while (docs/time-dilation.md, "Held to the calibration": a ResNet18
# step's rate wanders by about 10 % over tens of seconds here).
COMPUTE_HEADROOM = 0.15
# The same for a strategy whose collectives run in every step beside its training thread, in its container
# (DDP's and ZeRO's all-reduce, between the steps' compute): their threads spend the container's quota, and at
# 15 % a DDP rank's paced steps took 1.03-1.06x their plan (docs/time-dilation.md says what 30 % leaves).
COLLECTIVE_HEADROOM = 0.30
COLLECTIVE_EVERY_STEP = ("ddp", "zero")


def compute_headroom(strategy: str) -> float:
    """The quota above its plan a calibrated container of ``strategy`` gets, for the pacing.

    >>> compute_headroom("hivemind"), compute_headroom("ddp")
    (0.15, 0.3)
    """
    return COLLECTIVE_HEADROOM if strategy in COLLECTIVE_EVERY_STEP else COMPUTE_HEADROOM


@dataclass(frozen=True)
class Sizing:
    """How the run's hosts are sized on this machine: the CPU scale of an undilated local run, the time
    dilation D, the calibrated compute (None: not calibrated) and the one-thread probe it still needs."""

    scale: float = 1.0
    dilation: float = 1.0
    compute: dict[str, Any] | None = None
    local_rate_needed: dict[str, Any] | None = None


def size_run(
    settings: dict[str, Any],
    declared: dict[str, int],
    inventory: dict[str, Any],
    errors: list[str],
    warnings: list[str],
) -> Sizing:
    """The run's sizing (``Sizing``) and what it tells the user: calibrated compute where the local cluster
    dilates time, a CPU scale otherwise; VMs run at their own size.

    >>> size_run({"time_dilation": "off"}, {"p1": 2}, {"local": False, "host_cores": 2}, [], [])
    Sizing(scale=1.0, dilation=1.0, compute=None, local_rate_needed=None)
    """
    local = bool(inventory.get("local"))
    host_cores = int(inventory.get("host_cores") or 1)
    total, count = sum(declared.values()), len(declared)
    scale, dilation, compute, local_rate_needed = 1.0, 1.0, None, None
    # Locally the peers share this machine by CFS quota only, no pinning: equal peers get equal CPU wherever
    # the scheduler runs them, and a reserve stays for Ceph, Prometheus and the controller (docs/fair-cpu.md
    # has the measurements behind this).
    budget = max(host_cores - LOCAL_INFRA_RESERVE_CORES, 0.1 * host_cores)
    if local and settings["time_dilation"] != "off":
        compute, local_rate_needed = _calibrated_compute(
            settings, declared, inventory, budget, warnings, errors
        )
    if compute:
        dilation = _calibrated_dilation(settings["time_dilation"], compute, budget, errors)
    else:
        scale, dilation = _cpu_scale(settings["time_dilation"], local, total, budget, errors)
    if errors:
        return Sizing(scale, dilation, compute, local_rate_needed)
    stand_for = (
        f"the {count} containers stand for {total} vCPUs on this machine's {host_cores} cores "
        f"({LOCAL_INFRA_RESERVE_CORES} kept for the infrastructure)"
    )
    if compute:
        warnings.append(
            f"{stand_for}: each gets the CPU that makes it train at its vCPUs' calibrated rate / D "
            f"({compute['calibration']}; here one thread trains {compute['local_one_thread_rate']:g} "
            f"samples/s), and every time setting, fault time and link is dilated by D = {dilation:.2f}: "
            "modelled times are the measured ones / D (docs/compute-calibration.md)"
        )
        if settings["strategy"] == "hivemind":
            caveats = hivemind_model_caveats(declared, compute["hivemind_compute_factors"])
            warnings += [f"{caveat} (docs/study-scale.md)" for caveat in caveats]
    elif local and scale < 1.0 and dilation > 1.0:
        warnings.append(
            f"{stand_for}: each gets --cpus scaled by {scale:.3f}, and every time setting, fault time and "
            f"link is dilated by D = {dilation:.2f}: modelled times are the measured ones / D "
            "(docs/time-dilation.md)"
        )
    elif local and scale < 1.0:
        warnings.append(
            f"the {count} containers ask for {total} CPUs but this machine has {host_cores} "
            f"({LOCAL_INFRA_RESERVE_CORES} kept for the infrastructure): each gets --cpus scaled by "
            f"{scale:.3f}; with time_dilation=off, timings are NOT comparable with the study's VMs"
        )
    return Sizing(scale, dilation, compute, local_rate_needed)


def host_plans(
    settings: dict[str, Any],
    hosts: list[str],
    declared: dict[str, int],
    links: dict[str, dict[str, Any]],
    prices: dict[str, dict[str, Any]],
    sizing: Sizing,
    inventory: dict[str, Any],
    warnings: list[str],
) -> dict[str, dict[str, Any]]:
    """Each host's part of the run: its address, vCPUs, CPU limit and trainer threads, memory, modelled and
    local rates where calibrated, its links dilated by D and its prices.

    >>> hv = {"cluster_address": "10.0.0.1", "memory_mb": 2048}
    >>> plans = host_plans({}, ["p1"], {"p1": 2}, {"p1": {}}, {"p1": {}}, Sizing(),
    ...                     {"hostvars": {"p1": hv}, "host_cores": 2}, [])
    >>> plans["p1"]["cpus_limit"], plans["p1"]["threads"]
    (2.0, 2)
    """
    local = bool(inventory.get("local"))
    host_cores = int(inventory.get("host_cores") or 1)
    scale, dilation, compute = sizing.scale, sizing.dilation, sizing.compute
    plan: dict[str, dict[str, Any]] = {}
    for host in hosts:
        hv = inventory["hostvars"][host]
        vcpus = declared[host]
        cpus_limit = round(vcpus * scale, 3) if local else float(vcpus)
        threads = max(1, min(vcpus, math.ceil(cpus_limit), host_cores if local else vcpus))
        rates = {}
        if compute:  # one thread at the share of a core that gives the calibrated rate / D
            modelled = compute["modelled_rates"][host]
            local_rate = modelled / dilation
            cpus_limit = round((1 + compute["headroom"]) * local_rate / compute["local_one_thread_rate"], 3)
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
    return plan


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
    rates = _modelled_rates(settings, declared, calibration, warnings)
    if rates is None or not inventory.get("local_rate_dir"):
        return None, None
    modelled, factors = rates
    needed = _local_rate_probe(settings, len(declared), inventory, budget)
    local = _local_rate(needed, settings, inventory, errors)
    if local is None or "why" in local:
        return None, local
    compute = {
        "calibration": calibration.describe(),
        "calibration_file": calibration.path,
        "model": settings["model"],
        "batch_size": settings["batch_size"],
        "local_one_thread_rate": local["rate"],
        "local_rate_file": needed["file"],
        "local_rate_measured_at": local["measured_at"],
        "local_rate_dataset": needed["dataset"],
        "headroom": compute_headroom(settings["strategy"]),
        "local_rate_reused": local["reused"],
        "modelled_rates": modelled,
        "hivemind_compute_factors": factors,
    }
    return compute, None


def _modelled_rates(
    settings: dict[str, Any], declared: dict[str, int], calibration: Any, warnings: list[str]
) -> tuple[dict[str, float], dict[str, float]] | None:
    """Each host's modelled samples/s (its vCPUs' calibrated rate, a Hivemind peer's times the calibration's
    factor for its own processes where it has one) and those factors; None, said, where a rate is missing."""
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
        return None
    # a Hivemind peer computes beside its own processes: the calibration's factor where it has one
    factors: dict[str, float] = {}
    if settings["strategy"] == "hivemind":
        found = {
            host: calibration.hivemind_compute_factor(model, batch_size, v) for host, v in declared.items()
        }
        factors = {host: factor for host, factor in found.items() if factor is not None}
        modelled = {host: rate * factors.get(host, 1.0) for host, rate in modelled.items()}
    return modelled, factors


def _local_rate_probe(
    settings: dict[str, Any], containers: int, inventory: dict[str, Any], budget: float
) -> dict[str, Any]:
    """The probe of this machine's one-thread rate the run needs: its file, model, batch size, dataset (the
    run's where the controller holds it: the rate depends on the data; else synthetic images), the share of a
    core each of ``containers`` processes gets, and its steps (about 1280 samples a process)."""
    model, batch_size, dataset, data_root = (
        settings["model"],
        settings["batch_size"],
        settings["dataset"],
        None,
    )
    if dataset != "synthetic":
        held = Path(inventory.get("datasets_dir") or CONTROLLER_DATASETS) / dataset
        dataset, data_root = (dataset, str(held)) if held.is_dir() else ("synthetic", None)
    data = "" if dataset == "synthetic" else f"-{dataset}"
    local_file = Path(inventory["local_rate_dir"]) / f"{model}-bs{batch_size}-n{containers}{data}.json"
    share = round(min(1.0, budget / containers), 3)
    needed = {
        "model": model,
        "batch_size": batch_size,
        "file": str(local_file),
        "steps": max(10, 1280 // batch_size),
    }
    needed.update(share=f"{containers}:{share}", dataset=dataset, data_root=data_root)
    return needed


def _local_rate(
    needed: dict[str, Any], settings: dict[str, Any], inventory: dict[str, Any], errors: list[str]
) -> dict[str, Any] | None:
    """The one-thread rate ``needed``'s file holds (``rate``, ``measured_at``, ``reused``), or ``needed``
    with ``why`` it must be measured (missing, another machine's, too old), or None after an error."""
    local_file = Path(needed["file"])
    if not local_file.exists():
        return {**needed, "why": "not measured yet"}
    try:
        document = json.loads(local_file.read_text())
        # one clear error where it has no rate
        load_calibration(local_file).speedup(needed["model"], needed["batch_size"], 1)
        row = document["rates"][0]
        one_thread = float(row.get("samples_per_core_second") or row["samples_per_second"])
    except (CalibrationError, KeyError, IndexError, TypeError, ValueError) as exc:
        errors.append(f"this machine's one-thread rate: {exc} (delete {local_file} to measure it again)")
        return None
    # measured on another machine, core count or torch: not this machine's rate
    stale = changed(document.get("measured_on", {}), inventory.get("machine") or {})
    if stale:
        return {**needed, "why": f"measured on another machine ({', '.join(stale)})"}
    measured_at = (document.get("measured_on") or {}).get("measured_at")
    fresh = inventory.get("local_rate_fresh") in (True, "True", "true")
    if not fresh:
        why = _too_old(measured_at, inventory.get("now"), float(settings["local_rate_reuse_minutes"] or 0))
        if why:
            return {**needed, "why": why}
    return {"rate": one_thread, "measured_at": measured_at, "reused": not fresh}


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
    its modelled rate / D, with the compute's headroom more for the pacing (``compute_headroom``), so every
    share must be at most one core and all must fit the budget; auto takes the smallest such D (at least 1).

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
    room = 1 + compute.get("headroom", COMPUTE_HEADROOM)
    smallest = max(1.0, room * max(rates) / one_thread, room * sum(rates) / (budget * one_thread))
    if given == "auto":
        return smallest
    if given < smallest * (1 - 1e-9):
        errors.append(
            f"time_dilation={given:g} would ask this machine for more than it has: each container runs one "
            f"thread at its modelled rate / D with {room - 1:.0%} headroom ({one_thread:g} samples/s "
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
    default 1 Gbit/s where none is given), the delay and its jitter x D.

    >>> _dilated_links({"bandwidth_mbit": 100.0, "latency_ms": 5.0, "jitter_ms": 0.5}, 8.0)["jitter_ms"]
    4.0
    """
    if dilation == 1.0:
        return dict(links)
    modelled_rate = links["bandwidth_mbit"] or MODELLED_LINK_MBIT

    def stretched(name: str) -> float | None:
        return None if links.get(name) is None else round(links[name] * dilation, 3)

    return {
        "bandwidth_mbit": round(modelled_rate / dilation, 3),
        "latency_ms": stretched("latency_ms"),
        "jitter_ms": stretched("jitter_ms"),
        "modelled_bandwidth_mbit": modelled_rate,
        "modelled_latency_ms": links["latency_ms"],
        "modelled_jitter_ms": links.get("jitter_ms"),
    }
