"""Cross traffic (``-e cross_traffic=...``): bulk TCP flows between hosts during the run, parsed and checked
on the controller (validate.yml) and handed to the source host's fault agent (roles/fault_injection).

Syntax (docs/network.md): windows separated by commas or spaces, each ``SOURCE>TARGET@TIME+DURATION=RATE``;
times in seconds from the start barrier's release (``30``, ``30s``, ``1.5m``), rates in Mbit/s (``400``,
``400mbit``, ``1gbit``), both the modelled machine's: ``peer-02>peer-05@30s+60s=400mbit`` sends 400 Mbit/s
from peer-02 to peer-05 for 60 s, 30 s after the start (iperf3, one stream, on the port
``testbed_ports.cross_traffic``). A dilated run applies the window D times later and longer at the rate / D,
like a fault.

A window is a fault of kind ``cross`` on its source host: it is recorded with the faults (experiment.json,
the report's fault timeline) and, like them, may not overlap another fault of that host.
"""

from __future__ import annotations

import re
from typing import Any

from controller.faults import MBIT_UNITS, SECOND_UNITS, parse_quantity

SYNTAX = "SOURCE>TARGET@TIME+DURATION=RATE (e.g. peer-02>peer-05@30s+60s=400mbit)"
_WINDOW = re.compile(
    r"^(?P<source>[^>@\s]+)>(?P<target>[^>@\s]+)@(?P<at>[0-9.]+[a-z]*)"
    r"(?:\+(?P<duration>[0-9.]+[a-z]*))?(?:=(?P<rate>[0-9.]+[a-z]*))?$"
)


def testbed_cross_traffic(text: Any, plan: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"windows": [...], "errors": [...]}``: the windows of ``text`` as faults of kind ``cross``, in the
    modelled machine's times and rates (testbed_faults dilates them with the faults and checks them against
    the run's timeout and the host's other faults).

    ``plan``: the experiment's hosts (controller/plan.py), each with its link: a window above its source's or
    target's modelled rate is refused (an unshaped, undilated host has no known rate, and no limit).

    >>> plan = {"peer-01": {"bandwidth_mbit": 500.0}, "peer-02": {"bandwidth_mbit": None}}
    >>> [w["spec"] for w in testbed_cross_traffic("peer-01>peer-02@10s+20s=300", plan)["windows"]]
    ['cross:peer-01>peer-02@10s+20s=300']
    >>> checked = testbed_cross_traffic(
    ...     "peer-01>peer-09@10s=50 peer-01>peer-01@5s+5s=50, peer-02>peer-01@1m+10s=900", plan)
    >>> checked["windows"]
    []
    >>> for error in checked["errors"]:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    cross_traffic: peer-01>peer-09@10s=50: peer-09 is not in this run (hosts: peer-01, peer-02);
        needs a duration (+60s)
    cross_traffic: peer-01>peer-01@5s+5s=50: a flow needs two hosts (source and target are peer-01)
    cross_traffic: peer-02>peer-01@1m+10s=900: 900 Mbit/s is above peer-01's link (500 Mbit/s)
    """
    hosts = list(plan or {})
    # the modelled link (a dilated run's entry has both: the applied rate / D and the modelled one)
    link_mbit = {
        host: entry.get("modelled_bandwidth_mbit") or entry.get("bandwidth_mbit")
        for host, entry in (plan or {}).items()
    }
    windows: list[dict[str, Any]] = []
    errors: list[str] = []
    specs = [s for s in re.split(r"[,\s]+", str(text or "").strip()) if s]
    for spec in specs:
        match = _WINDOW.match(spec)
        if not match:
            errors.append(f"cross_traffic: {spec!r} is not {SYNTAX}")
            continue
        source, target = match["source"], match["target"]
        problems = [
            f"{host} is not in this run (hosts: {', '.join(hosts) or 'none'})"
            for host in dict.fromkeys((source, target))
            if hosts and host not in hosts
        ]
        if source == target:
            problems.append(f"a flow needs two hosts (source and target are {source})")
        at = parse_quantity(match["at"], SECOND_UNITS)
        duration = parse_quantity(match["duration"], SECOND_UNITS) if match["duration"] else None
        rate = parse_quantity(match["rate"], MBIT_UNITS) if match["rate"] else None
        if at is None:
            problems.append(f"time {match['at']!r} is not seconds like 30, 30s or 1.5m")
        if not match["duration"]:
            problems.append("needs a duration (+60s)")
        elif not duration:
            problems.append(f"duration {match['duration']!r} is not a positive time like 60s")
        if not match["rate"]:
            problems.append("needs a rate (=400mbit)")
        elif not rate:
            problems.append(f"rate {match['rate']!r} is not a positive rate like 400mbit")
        # the narrower of the two links, where either is known
        links = sorted((float(link_mbit[h]), h) for h in (source, target) if link_mbit.get(h))
        if rate and links and rate > links[0][0]:
            problems.append(f"{rate:g} Mbit/s is above {links[0][1]}'s link ({links[0][0]:g} Mbit/s)")
        if problems:
            errors.append(f"cross_traffic: {spec}: {'; '.join(problems)}")
            continue
        windows.append(
            {
                "spec": f"cross:{spec}",
                "kind": "cross",
                "host": source,
                "target": target,
                "at_seconds": at,
                "duration_seconds": duration,
                "rate_mbit": rate,
                "before_start": False,
            }
        )
    return {"windows": windows, "errors": errors}


def testbed_with_target_address(fault: dict[str, Any], plan: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A cross-traffic window with its target's cluster address (what the source's agent connects to); any
    other fault as it is.

    >>> plan = {"peer-02": {"address": "10.0.0.2"}}
    >>> testbed_with_target_address({"kind": "cross", "target": "peer-02"}, plan)
    {'kind': 'cross', 'target': 'peer-02', 'target_address': '10.0.0.2'}
    """
    if fault.get("kind") != "cross":
        return fault
    return {**fault, "target_address": plan[fault["target"]]["address"]}
