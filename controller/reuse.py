"""Measurements a run takes before it trains and later runs reuse (issue #53): the CPU probe of a
configuration (playbooks/cpu.yml). This machine's one-thread rate is the other (controller/plan.py,
measured again when the machine changed).

A CPU probe is reused by a later run of the same configuration: the same hosts at the same addresses with the
same plan (vCPUs, CPU limits, threads, memory, links), the same probe length, on the same controller machine
(cores, CPU model), for at most ``CPU_PROBE_REUSE_HOURS`` (the VMs' neighbours come and go; a probe is a
measurement of a moment). ``-e refresh=true`` measures it again. The record lives on the controller, under
``~/.cache/testbed/cpu-probe/<key>.json``; experiment.json's ``cpu_probe`` of each host says when it was taken
(``measured_at``) and whether this run reused it (``reused``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

#: how long a CPU probe of one configuration stands for later runs of it
CPU_PROBE_REUSE_HOURS = 24.0
CPU_PROBE_KIND = "testbed-cpu-probe"


def cpu_probe_key(
    plan: dict[str, dict[str, Any]], seconds: float, machine: dict[str, Any], inventory: str = ""
) -> str:
    """The configuration a CPU probe measured: its hosts' plan, its length, the machine and the inventory.

    >>> plan = {"peer-01": {"vcpus": 1, "cpus_limit": 0.5}, "peer-02": {"vcpus": 1, "cpus_limit": 0.5}}
    >>> key = cpu_probe_key(plan, 5.0, {"cores": 2})
    >>> len(key), key == cpu_probe_key(dict(reversed(plan.items())), 5, {"cores": 2})
    (16, True)
    >>> key == cpu_probe_key({**plan, "peer-02": {"vcpus": 1, "cpus_limit": 0.6}}, 5.0, {"cores": 2})
    False
    """
    configuration = {"plan": plan, "seconds": float(seconds), "machine": machine, "inventory": inventory}
    text = json.dumps(configuration, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def testbed_reusable_cpu_probe(
    text: str, key: str, hosts: list[str], now: str, refresh: bool = False
) -> dict[str, Any]:
    """Each host's earlier probe from a record's ``text`` (empty: none), or {} where it must be measured: no
    record, another key, a host missing, older than CPU_PROBE_REUSE_HOURS, or ``refresh``.

    >>> at = "2026-11-28T10:00:00+00:00"
    >>> record = testbed_cpu_probe_record({"p1": {"cores_used": 0.4}}, "k", at)
    >>> testbed_reusable_cpu_probe(json.dumps(record), "k", ["p1"], "2026-11-28T12:00:00+00:00")
    {'p1': {'cores_used': 0.4, 'measured_at': '2026-11-28T10:00:00+00:00', 'reused': True}}
    >>> testbed_reusable_cpu_probe(json.dumps(record), "k", ["p1"], "2026-11-29T11:00:00+00:00")
    {}
    >>> reuse = testbed_reusable_cpu_probe
    >>> reuse(json.dumps(record), "other", ["p1"], at), reuse("", "k", ["p1"], at), reuse("{}", "k", [], at)
    ({}, {}, {})
    """
    if refresh or not text:
        return {}
    try:
        record = json.loads(text)
        measured = datetime.datetime.fromisoformat(record["measured_at"])
        age = datetime.datetime.fromisoformat(now) - measured
        probes = {host: dict(record["probes"][host]) for host in hosts}
    except (ValueError, KeyError, TypeError):
        return {}  # unreadable, or not every host's: measured again
    if record.get("kind") != CPU_PROBE_KIND or record.get("key") != key:
        return {}
    if not datetime.timedelta(0) <= age <= datetime.timedelta(hours=CPU_PROBE_REUSE_HOURS):
        return {}
    return {host: {**probe, "reused": True} for host, probe in probes.items()}


def testbed_cpu_probe_record(probes: dict[str, Any], key: str, now: str) -> dict[str, Any]:
    """The record a run writes after it probed: each host's result with when it was measured."""
    stamped = {host: {**probe, "measured_at": now} for host, probe in probes.items()}
    return {"kind": CPU_PROBE_KIND, "key": key, "measured_at": now, "probes": stamped}
