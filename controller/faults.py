"""The experiment's planned faults (``-e faults=...``), parsed and checked on the controller (validate.yml).

Syntax (docs/faults.md): faults separated by commas or spaces, each ``KIND:HOST@TIME[+DURATION][=RATE]``;
times in seconds from the start barrier's release (``60``, ``60s``, ``1.5m``), rates in Mbit/s (``50``,
``50mbit``, ``2gbit``, ``500kbit``):

- ``kill:peer-03@60s`` SIGKILL the peer's trainer (every process of its unit); ``kill:peer-03@start``: as soon
  as its trainer starts, before the start barrier can release (the others go on only with ``min_peers``);
- ``pause:peer-02@30s+20s`` SIGSTOP the trainer, SIGCONT it 20 s later;
- ``partition:peer-04@90s+30s`` drop everything the peer sends to the other peers for 30 s, then heal;
- ``slow:peer-05@40s=50mbit`` (or ``...@40s+60s=50mbit``) cap the peer's outgoing link at 50 Mbit/s, until
  the end or for the duration.
"""

from __future__ import annotations

import re
from typing import Any

KINDS = ("kill", "pause", "partition", "slow")
NEEDS_DURATION = ("pause", "partition")
_FAULT = re.compile(
    r"^(?P<kind>[a-z_]+):(?P<host>[^@\s]+)@(?P<at>start|[0-9.]+[a-z]*)"
    r"(?:\+(?P<duration>[0-9.]+[a-z]*))?(?:=(?P<rate>[0-9.]+[a-z]*))?$"
)
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_MBIT = {"": 1.0, "mbit": 1.0, "kbit": 1e-3, "gbit": 1e3}
SYNTAX = "KIND:HOST@TIME[+DURATION][=RATE] (e.g. kill:peer-03@60s, pause:peer-02@30s+20s, kill:peer-03@start)"


def _number(text: str, units: dict[str, float]) -> float | None:
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)([a-z]*)", text)
    if not match or match[2] not in units:
        return None
    return float(match[1]) * units[match[2]]


def _parse_one(
    spec: str, hosts: list[str], errors: list[str], bootstrap: str | None
) -> dict[str, Any] | None:
    match = _FAULT.match(spec)
    if not match:
        errors.append(f"faults: {spec!r} is not {SYNTAX}")
        return None
    kind, host = match["kind"], match["host"]
    problems = []
    if kind not in KINDS:
        problems.append(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    if hosts and host not in hosts:  # no hosts: the settings have other errors, reported already
        problems.append(f"{host} is not in this run (hosts: {', '.join(hosts) or 'none'})")
    before_start = match["at"] == "start"
    at = 0.0 if before_start else _number(match["at"], _SECONDS)
    if before_start and kind != "kill":
        problems.append("only a kill can happen @start (before the start barrier)")
    if before_start and host == bootstrap:
        problems.append(f"{host} is the bootstrap peer (the others join through it): no kill @start")
    duration = _number(match["duration"], _SECONDS) if match["duration"] else None
    rate = _number(match["rate"], _MBIT) if match["rate"] else None
    if at is None:
        problems.append(f"time {match['at']!r} is not seconds like 60, 60s or 1.5m")
    if match["duration"] and not duration:
        problems.append(f"duration {match['duration']!r} is not a positive time like 20s")
    if match["rate"] and not rate:
        problems.append(f"rate {match['rate']!r} is not a positive rate like 50mbit")
    if kind in NEEDS_DURATION and not match["duration"]:
        problems.append(f"{kind} needs a duration (+20s)")
    if kind == "kill" and (match["duration"] or match["rate"]):
        problems.append("kill takes no duration and no rate (a killed trainer stays dead)")
    if kind == "slow" and not match["rate"]:
        problems.append("slow needs a rate (=50mbit)")
    if kind in NEEDS_DURATION and match["rate"]:
        problems.append(f"{kind} takes no rate")
    if problems:
        errors.append(f"faults: {spec}: {'; '.join(problems)}")
        return None
    return {
        "spec": spec,
        "kind": kind,
        "host": host,
        "at_seconds": at,
        "duration_seconds": duration,
        "rate_mbit": rate,
        "before_start": before_start,
    }


def testbed_faults(
    text: Any,
    hosts: list[str],
    strategy: str,
    run_timeout: float,
    dht_host: str | None = None,
    time_dilation: float = 1.0,
) -> dict[str, Any]:
    """``{"faults": [...], "errors": [...]}`` for the ``faults`` variable (None or '' for none).

    ``dht_host``: the host of a DHT-only bootstrap node; None when the first peer bootstraps (and so must not
    be killed before the others joined it). ``time_dilation``: D of the run (controller/plan.py): the spec's
    times and rates are the modelled machine's; the agent applies them D times later and longer, and a
    slow link at the rate / D (``modelled`` keeps the spec's values).

    Each fault: spec, kind, host, at_seconds, duration_seconds (None: to the end), rate_mbit (slow only).

    >>> dilated = testbed_faults("slow:peer-02@10s+5s=80mbit", ["peer-01", "peer-02"], "hivemind", 3600,
    ...                          time_dilation=8.0)["faults"][0]
    >>> [dilated[name] for name in ("at_seconds", "duration_seconds", "rate_mbit")], dilated["modelled"]
    ([80.0, 40.0, 10.0], {'at_seconds': 10.0, 'duration_seconds': 5.0, 'rate_mbit': 80.0})

    >>> hosts = ["peer-01", "peer-02", "peer-03"]
    >>> plan = testbed_faults("kill:peer-03@60s, pause:peer-02@1m+20", hosts, "hivemind", 3600)
    >>> [(f["kind"], f["host"], f["at_seconds"], f["duration_seconds"]) for f in plan["faults"]]
    [('kill', 'peer-03', 60.0, None), ('pause', 'peer-02', 60.0, 20.0)]
    >>> plan["errors"]
    []
    >>> testbed_faults("kill:peer-03@start", hosts, "hivemind", 3600)["faults"][0]["before_start"]
    True
    >>> for error in testbed_faults("kill:peer-01@start pause:peer-02@start+5s", hosts, "hivemind", 3600)[
    ...     "errors"
    ... ]:
    ...     print(error)
    faults: kill:peer-01@start: peer-01 is the bootstrap peer (the others join through it): no kill @start
    faults: pause:peer-02@start+5s: only a kill can happen @start (before the start barrier)
    >>> testbed_faults("kill:peer-01@start", hosts, "hivemind", 3600, dht_host="monitor")["errors"]
    []
    >>> testbed_faults("crash:peer-09@10s", hosts, "hivemind", 3600)["errors"]
    ["faults: crash:peer-09@10s: unknown kind 'crash' (kinds: kill, pause, partition, slow); peer-09 is not \
in this run (hosts: peer-01, peer-02, peer-03)"]
    >>> testbed_faults("pause:peer-01@10s+30s partition:peer-01@30s+5s", hosts, "hivemind", 3600)["errors"]
    ['faults: pause:peer-01@10s+30s and partition:peer-01@30s+5s overlap on peer-01 (one fault at a time per \
host)']
    >>> testbed_faults("slow:peer-02@3590s+20s=50mbit", hosts, "hivemind", 3600)["errors"]
    ['faults: slow:peer-02@3590s+20s=50mbit ends after the run_timeout of 3600 s']
    """
    errors: list[str] = []
    if isinstance(text, (list, tuple)):  # -e '{"faults": [...]}'
        text = ",".join(str(item) for item in text)
    specs = [s for s in re.split(r"[,\s]+", str(text or "").strip()) if s]
    bootstrap = hosts[0] if hosts and dht_host is None else None
    faults = [f for f in (_parse_one(spec, hosts, errors, bootstrap) for spec in specs) if f is not None]
    if time_dilation != 1:
        faults = [_dilated(fault, time_dilation) for fault in faults]
    if specs and strategy == "baseline":
        errors.append(
            "faults: a baseline run has one host and nobody to fail against (hivemind, ddp, zero, ...)"
        )
    for fault in faults:
        end = fault["at_seconds"] + (fault["duration_seconds"] or 0.0)
        if end >= float(run_timeout):
            errors.append(f"faults: {fault['spec']} ends after the run_timeout of {run_timeout:g} s")
    by_host: dict[str, list[dict[str, Any]]] = {}
    for fault in sorted(faults, key=lambda f: f["at_seconds"]):
        for earlier in by_host.get(fault["host"], []):
            # a kill, or a slow link without a duration, lasts to the end of the run
            earlier_end = earlier["at_seconds"] + (earlier["duration_seconds"] or float("inf"))
            if fault["at_seconds"] < earlier_end:
                errors.append(
                    f"faults: {earlier['spec']} and {fault['spec']} overlap on {fault['host']} "
                    "(one fault at a time per host)"
                )
        by_host.setdefault(fault["host"], []).append(fault)
    return {"faults": [] if errors else sorted(faults, key=lambda f: f["at_seconds"]), "errors": errors}


def _dilated(fault: dict[str, Any], factor: float) -> dict[str, Any]:
    modelled = {name: fault[name] for name in ("at_seconds", "duration_seconds", "rate_mbit")}
    scaled = {
        "at_seconds": fault["at_seconds"] * factor,
        "duration_seconds": None if fault["duration_seconds"] is None else fault["duration_seconds"] * factor,
        "rate_mbit": None if fault["rate_mbit"] is None else fault["rate_mbit"] / factor,
    }
    return {**fault, **scaled, "modelled": modelled}


def testbed_fault_timeline(planned: list[dict[str, Any]], hostvars: Any) -> list[dict[str, Any]]:
    """experiment.json's ``faults``: each planned fault with what its host's agent recorded.

    ``hostvars``: per host its variables, where role fault_injection's ``collect`` left the agent's timeline
    as ``fault_injection_timeline`` (``started``: Unix time of the first step, ``faults`` with ``status`` and
    actual times). Status: applied, healed, skipped, failed, planned (the agent never got to it) or unknown
    (no timeline).

    >>> plan = [{"spec": "kill:peer-03@60s", "kind": "kill", "host": "peer-03", "at_seconds": 60.0}]
    >>> agent = {"started": 100.0, "faults": [{**plan[0], "status": "applied", "applied_at": 160.4}]}
    >>> hosts = {"peer-03": {"fault_injection_timeline": agent}}
    >>> [(f["status"], f["started"], f["applied_at"]) for f in testbed_fault_timeline(plan, hosts)]
    [('applied', 100.0, 160.4)]
    >>> testbed_fault_timeline(plan, {"peer-03": {}})[0]["status"]
    'unknown'
    """
    records = []
    for fault in planned:
        host = hostvars.get(fault["host"], {})
        timeline = host.get("fault_injection_timeline") or {}
        recorded = next((f for f in timeline.get("faults", []) if f.get("spec") == fault["spec"]), None)
        record = {**fault, **(recorded or {}), "started": timeline.get("started")}
        if recorded is None:
            record["status"] = "unknown"
            record["detail"] = timeline.get("error") or "no timeline from this host's fault agent"
        records.append(record)
    return records


def testbed_excused_problems(reasons: list[str], timeline: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Split the run's problems into ``expected`` (a host killed on purpose has no summary) and ``remaining``.

    >>> kill = [{"kind": "kill", "host": "peer-03", "status": "applied"}]
    >>> testbed_excused_problems(["peer-01: x; peer-03: no summary.json", "peer-03: no summary.json"], kill)
    {'expected': ['peer-03: no summary.json'], 'remaining': ['peer-01: x']}
    """
    killed = {f["host"] for f in timeline if f.get("kind") == "kill" and f.get("status") == "applied"}
    expected: list[str] = []
    remaining: list[str] = []
    for reason in reasons:
        for part in (p.strip() for p in str(reason).split("; ")):
            target = expected if part.split(":", 1)[0] in killed else remaining
            if part and part not in target:
                target.append(part)
    return {"expected": expected, "remaining": remaining}
