"""Measurements a run takes before it trains and later runs reuse: the CPU probe
(playbooks/cpu.yml) and the bandwidth probe (playbooks/network.yml) of a configuration. This machine's
one-thread rate is the third (controller/plan.py, measured again when the machine changed).

A probe is reused by a later run of the same configuration: the same hosts at the same addresses with the
same plan (vCPUs, CPU limits, threads, memory, links), the same probe settings, on the same controller machine
(cores, CPU model, torch), for at most ``PROBE_REUSE_HOURS`` (the VMs' neighbours come and go; a probe is a
measurement of a moment). ``-e refresh=true`` measures again. The records live on the controller, under
``~/.cache/testbed/<probe>/<key>.json``; experiment.json's ``cpu_probe`` of each host and its ``network`` say
when they were taken (``measured_at``) and whether this run reused them (``reused``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

#: how long a probe of one configuration stands for later runs of it
PROBE_REUSE_HOURS = 24.0
PROBE_KIND = "testbed-probe"


def testbed_probe_key(
    plan: dict[str, dict[str, Any]], probe: dict[str, Any], machine: dict[str, Any], inventory: str = ""
) -> str:
    """The configuration a probe measured: the hosts' plan, the probe's settings, the machine, the inventory.

    >>> plan = {"peer-01": {"vcpus": 1, "cpus_limit": 0.5}, "peer-02": {"vcpus": 1, "cpus_limit": 0.5}}
    >>> probe, machine = {"cpu_seconds": 5.0}, {"cores": 2}
    >>> key = testbed_probe_key(plan, probe, machine)
    >>> len(key), key == testbed_probe_key(dict(reversed(plan.items())), probe, machine)
    (16, True)
    >>> key == testbed_probe_key({**plan, "peer-02": {"vcpus": 1, "cpus_limit": 0.6}}, probe, machine)
    False
    """
    configuration = {"plan": plan, "probe": probe, "machine": machine, "inventory": inventory}
    text = json.dumps(configuration, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def testbed_reusable_probe(
    text: str, key: str, names: list[str], now: str, refresh: bool = False
) -> dict[str, Any]:
    """Each name's earlier result (a host's, or "network") from a record's ``text`` (empty: none), or {} where
    it must be measured: no record, another key, a name missing, older than PROBE_REUSE_HOURS, ``refresh``.

    >>> at = "2026-11-28T10:00:00+00:00"
    >>> record = testbed_probe_record({"p1": {"cores_used": 0.4}}, "k", at)
    >>> testbed_reusable_probe(json.dumps(record), "k", ["p1"], "2026-11-28T12:00:00+00:00")
    {'p1': {'cores_used': 0.4, 'measured_at': '2026-11-28T10:00:00+00:00', 'reused': True}}
    >>> testbed_reusable_probe(json.dumps(record), "k", ["p1"], "2026-11-29T11:00:00+00:00")
    {}
    >>> reuse = testbed_reusable_probe
    >>> reuse(json.dumps(record), "other", ["p1"], at), reuse("", "k", ["p1"], at), reuse("{}", "k", [], at)
    ({}, {}, {})
    """
    if refresh or not text:
        return {}
    try:
        record = json.loads(text)
        measured = datetime.datetime.fromisoformat(record["measured_at"])
        age = datetime.datetime.fromisoformat(now) - measured
        probes = {name: dict(record["probes"][name]) for name in names}
    except (ValueError, KeyError, TypeError):
        return {}  # unreadable, or not every host's: measured again
    if record.get("kind") != PROBE_KIND or record.get("key") != key:
        return {}
    if not datetime.timedelta(0) <= age <= datetime.timedelta(hours=PROBE_REUSE_HOURS):
        return {}
    return {name: {**probe, "reused": True} for name, probe in probes.items()}


def testbed_probe_record(probes: dict[str, Any], key: str, now: str) -> dict[str, Any]:
    """The record a run writes after it probed: each name's result with when it was measured."""
    stamped = {name: {**probe, "measured_at": now} for name, probe in probes.items()}
    return {"kind": PROBE_KIND, "key": key, "measured_at": now, "probes": stamped}
