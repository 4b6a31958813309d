"""The experiment's planned faults (``-e faults=...``), parsed and checked on the controller (validate.yml).

Syntax (docs/faults.md): faults separated by commas or spaces, each ``KIND:HOST@TIME[+DURATION][=RATE]``;
times in seconds from the start barrier's release (``60``, ``60s``, ``1.5m``), rates in Mbit/s (``50``,
``50mbit``, ``2gbit``, ``500kbit``):

- ``kill:peer-03@60s`` SIGKILL the peer's trainer (every process of its unit); ``kill:peer-03@start``: as soon
  as its trainer starts, before the start barrier can release (the others go on only with ``min_peers``);
- ``pause:peer-02@30s+20s`` SIGSTOP the trainer, SIGCONT it 20 s later;
- ``partition:peer-04@90s+30s`` drop everything the peer sends to the other peers for 30 s, then heal;
- ``slow:peer-05@40s=50mbit`` (or ``...@40s+60s=50mbit``) cap the peer's outgoing link at 50 Mbit/s, until
  the end or for the duration;
- ``restart:peer-03@60s+20s`` kill the peer's trainer, start it again 20 s later: it rejoins the running
  collaboration (Hivemind downloads the state first, torchft heals a DiLoCo replica; not the others).

Churn (``-e churn=...``, ``churn_schedule``): leaves and rejoins drawn from a seed, each one such a restart.
"""

from __future__ import annotations

import random
import re
import zlib
from typing import Any

KINDS = ("kill", "pause", "partition", "slow", "restart")
NEEDS_DURATION = ("pause", "partition", "restart")
#: strategies whose peers can come back into a running collaboration (restart, churn)
REJOINING_STRATEGIES = ("hivemind", "diloco")
_FAULT = re.compile(
    r"^(?P<kind>[a-z_]+):(?P<host>[^@\s]+)@(?P<at>start|[0-9.]+[a-z]*)"
    r"(?:\+(?P<duration>[0-9.]+[a-z]*))?(?:=(?P<rate>[0-9.]+[a-z]*))?$"
)
SECOND_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
MBIT_UNITS = {"": 1.0, "mbit": 1.0, "kbit": 1e-3, "gbit": 1e3}
SYNTAX = "KIND:HOST@TIME[+DURATION][=RATE] (e.g. kill:peer-03@60s, pause:peer-02@30s+20s, kill:peer-03@start)"
CHURN_SYNTAX = "mtbf=TIME downtime=TIME [seed=N] [until=TIME] (e.g. mtbf=30s downtime=10s seed=7)"


def parse_quantity(text: str, units: dict[str, float]) -> float | None:
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)([a-z]*)", text)
    if not match or match[2] not in units:
        return None
    return float(match[1]) * units[match[2]]


def _parse_one(
    spec: str, hosts: list[str], errors: list[str], bootstrap: str | None, strategy: str
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
    at = 0.0 if before_start else parse_quantity(match["at"], SECOND_UNITS)
    if before_start and kind != "kill":
        problems.append("only a kill can happen @start (before the start barrier)")
    if before_start and host == bootstrap:
        problems.append(f"{host} is the bootstrap peer (the others join through it): no kill @start")
    if kind == "restart" and host == bootstrap and strategy != "diloco":  # DiLoCo rejoins via the Lighthouse
        problems.append(f"{host} is the bootstrap peer: restarted, it would have nobody to rejoin through")
    duration = parse_quantity(match["duration"], SECOND_UNITS) if match["duration"] else None
    rate = parse_quantity(match["rate"], MBIT_UNITS) if match["rate"] else None
    if at is None:
        problems.append(f"time {match['at']!r} is not seconds like 60, 60s or 1.5m")
    if match["duration"] and not duration:
        problems.append(f"duration {match['duration']!r} is not a positive time like 20s")
    if match["rate"] and not rate:
        problems.append(f"rate {match['rate']!r} is not a positive rate like 50mbit")
    if kind in NEEDS_DURATION and not match["duration"]:
        problems.append(f"{kind} needs a {'downtime' if kind == 'restart' else 'duration'} (+20s)")
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
    churn: Any = None,
    min_peers: int = 0,
    experiment_id: str = "",
    cross_traffic: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``{"faults": [...], "churn": {...} or None, "errors": [...]}`` for the ``faults`` and ``churn``
    variables (None or '' for none). ``churn`` adds its drawn restarts (``churn_schedule``) to the faults,
    ``cross_traffic`` the windows of controller/cross_traffic.py (faults of kind ``cross``, dilated and
    checked here with the others).

    ``dht_host``: the host of a DHT-only bootstrap node; None when the first peer bootstraps (and so must not
    be killed before the others joined it). ``time_dilation``: D of the run (controller/plan.py): the spec's
    times and rates are the modelled machine's, as ``run_timeout`` is; the agent applies them D times later
    and longer, and a slow link at the rate / D (``modelled`` keeps the spec's values).

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
    ["faults: crash:peer-09@10s: unknown kind 'crash' (kinds: kill, pause, partition, slow, restart); \
peer-09 is not in this run (hosts: peer-01, peer-02, peer-03)"]
    >>> testbed_faults("restart:peer-02@10s", hosts, "hivemind", 3600)["errors"]
    ['faults: restart:peer-02@10s: restart needs a downtime (+20s)']
    >>> testbed_faults("restart:peer-02@10s+5s", hosts, "ddp", 3600)["errors"][0][:72]
    'faults: restart:peer-02@10s+5s: a restarted peer rejoins only a hivemind'
    >>> churned = testbed_faults("", hosts, "hivemind", 600, churn="mtbf=30s downtime=5s seed=3", min_peers=2)
    >>> churned["churn"]["seed"], {f["kind"] for f in churned["faults"]}, churned["errors"]
    (3, {'restart'}, [])
    >>> testbed_faults("", hosts, "baseline", 600, churn="mtbf=30s downtime=5s")["errors"]
    ['churn: a baseline run has one host: nobody leaves and rejoins']
    >>> testbed_faults("pause:peer-01@10s+30s partition:peer-01@30s+5s", hosts, "hivemind", 3600)["errors"]
    ['faults: pause:peer-01@10s+30s and partition:peer-01@30s+5s overlap on peer-01 (one fault at a time per \
host)']
    >>> testbed_faults("slow:peer-02@3590s+20s=50mbit", hosts, "hivemind", 3600)["errors"]
    ['faults: slow:peer-02@3590s+20s=50mbit ends after the run_timeout of 3600 s']
    >>> testbed_faults("slow:peer-02@3000s+20s=50mbit", hosts, "hivemind", 3600, time_dilation=4.0)["errors"]
    []
    """
    errors: list[str] = []
    if isinstance(text, (list, tuple)):  # -e '{"faults": [...]}'
        text = ",".join(str(item) for item in text)
    specs = [s for s in re.split(r"[,\s]+", str(text or "").strip()) if s]
    bootstrap = hosts[0] if hosts and dht_host is None else None
    parsed = (_parse_one(spec, hosts, errors, bootstrap, strategy) for spec in specs)
    faults = [f for f in parsed if f is not None] + list(cross_traffic or [])
    schedule = None
    if churn not in (None, "") and strategy == "baseline":
        errors.append("churn: a baseline run has one host: nobody leaves and rejoins")
    elif churn not in (None, ""):
        through = None if strategy == "diloco" else bootstrap  # a DiLoCo replica rejoins via the Lighthouse
        schedule = churn_schedule(
            churn, hosts, faults, float(run_timeout), min_peers, through, experiment_id, errors
        )
        faults += schedule["restarts"] if schedule else []
    if time_dilation != 1:
        faults = [_dilated(fault, time_dilation) for fault in faults]
    if specs and strategy == "baseline":  # (cross traffic there is refused by its missing target)
        errors.append(
            "faults: a baseline run has one host and nobody to fail against (hivemind, ddp, zero, ...)"
        )
    elif strategy not in REJOINING_STRATEGIES:
        for fault in faults:
            if fault["kind"] == "restart":
                errors.append(
                    f"faults: {fault['spec']}: a restarted peer rejoins only a "
                    f"{'/'.join(REJOINING_STRATEGIES)} run (got strategy={strategy}; "
                    "kill is the fault it survives)"
                )
    for fault in faults:
        end = fault["at_seconds"] + (fault["duration_seconds"] or 0.0)
        if end >= float(run_timeout) * time_dilation:
            variable = "cross_traffic" if fault["kind"] == "cross" else "faults"
            errors.append(f"{variable}: {fault['spec']} ends after the run_timeout of {run_timeout:g} s")
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
    return {
        "faults": [] if errors else sorted(faults, key=lambda f: f["at_seconds"]),
        "churn": None
        if errors or schedule is None
        else {k: v for k, v in schedule.items() if k != "restarts"},
        "errors": errors,
    }


def _churn_settings(churn: Any, errors: list[str]) -> dict[str, Any] | None:
    if isinstance(churn, dict):  # -e '{"churn": {"mtbf": 30, "downtime": 10}}'
        pairs = [(str(k), str(v)) for k, v in churn.items()]
    else:
        pairs = []
        for item in (i for i in re.split(r"[,\s]+", str(churn).strip()) if i):
            name, _, value = item.partition("=")
            pairs.append((name, value))
    settings: dict[str, Any] = {}
    for name, value in pairs:
        if name == "seed":
            settings[name] = int(value) if re.fullmatch(r"[0-9]+", value) else None
        elif name in ("mtbf", "downtime", "until"):
            settings[name] = parse_quantity(value, SECOND_UNITS)
        else:
            errors.append(f"churn: unknown setting {name!r} ({CHURN_SYNTAX})")
            return None
        if settings[name] is None:
            wanted = "an integer" if name == "seed" else "a time like 30s"
            errors.append(f"churn: {name}={value!r} is not {wanted}")
            return None
    missing = [name for name in ("mtbf", "downtime") if name not in settings]
    if missing:
        errors.append(f"churn: {' and '.join(missing)} missing ({CHURN_SYNTAX})")
        return None
    return settings


def churn_schedule(
    churn: Any,
    hosts: list[str],
    faults: list[dict[str, Any]],
    run_seconds: float,
    min_peers: int,
    bootstrap: str | None,
    experiment_id: str,
    errors: list[str],
) -> dict[str, Any] | None:
    """Leaves and rejoins drawn at random, each a ``restart`` fault (times in the modelled machine's seconds).

    Leaves come as a Poisson process (exponential gaps of mean ``mtbf``) from the start barrier's release
    until ``until`` (default: the run's timeout); each takes a peer that is up, chosen at random, down for
    ``downtime``. Never the bootstrap peer (the others rejoin through it), nor a peer with a planned fault of
    its own, and never so many at once that fewer than ``min_peers`` (2 when unset) stay up: such a draw is
    dropped (``dropped``). The seed (default: from the experiment id) is recorded: the same seed and settings
    give the same schedule.

    >>> hosts = ["peer-01", "peer-02", "peer-03", "peer-04"]
    >>> plan = churn_schedule("mtbf=20s downtime=5s seed=7 until=90s", hosts, [], 600, 2, "peer-01", "x", [])
    >>> [f["spec"] for f in plan["restarts"]] == [
    ...     f["spec"] for f in churn_schedule("mtbf=20 downtime=5 seed=7 until=90", hosts, [], 600, 2,
    ...                                       "peer-01", "x", [])["restarts"]]
    True
    >>> {f["host"] for f in plan["restarts"]} <= {"peer-02", "peer-03", "peer-04"}, plan["seed"]
    (True, 7)
    >>> errors = []
    >>> churn_schedule("mtbf=0 downtime=5s", hosts, [], 600, 0, "peer-01", "x", errors), errors
    (None, ['churn: mtbf must be above 0 s (got 0)'])
    >>> errors = []
    >>> churn_schedule("mtbf=30s downtime=20m", hosts, [], 600, 0, "peer-01", "x", errors), errors
    (None, ['churn: downtime=1200 s is longer than the run (600 s)'])
    """
    settings = _churn_settings(churn, errors)
    if settings is None:
        return None
    mtbf, downtime = settings["mtbf"], settings["downtime"]
    until = settings.get("until") or run_seconds
    seed = settings.get("seed")
    if seed is None:
        seed = zlib.crc32(experiment_id.encode())
    floor = min_peers or 2
    problems = []
    if mtbf <= 0:
        problems.append(f"churn: mtbf must be above 0 s (got {mtbf:g})")
    if downtime <= 0:
        problems.append(f"churn: downtime must be above 0 s (got {downtime:g})")
    if downtime >= run_seconds or downtime >= until:
        length = min(run_seconds, until)
        problems.append(f"churn: downtime={downtime:g} s is longer than the run ({length:g} s)")
    if until > run_seconds:
        problems.append(f"churn: until={until:g} s is after the run's end ({run_seconds:g} s)")
    faulted = {f["host"] for f in faults}
    dead = {f["host"] for f in faults if f["kind"] == "kill"}
    candidates = [h for h in hosts if h != bootstrap and h not in faulted]
    if not problems and (not candidates or len(hosts) - len(dead) - 1 < floor):
        up = len(hosts) - len(dead)
        problems.append(
            f"churn: {up} peers up and min_peers={floor}: none can leave without the others dropping below it"
            if candidates
            else "churn: no peer can leave (not the bootstrap peer, nor one with a fault of its own)"
        )
    if problems:
        errors.extend(problems)
        return None
    draw = random.Random(seed)
    restarts: list[dict[str, Any]] = []
    back_at: dict[str, float] = {}
    dropped = 0
    moment = 0.0
    while True:
        moment += draw.expovariate(1.0 / mtbf)
        if moment + downtime >= until:
            break
        up = [h for h in candidates if back_at.get(h, 0.0) <= moment]
        down = len(candidates) - len(up)
        if not up or len(hosts) - len(dead) - down - 1 < floor:
            dropped += 1
            continue
        host = draw.choice(up)
        back_at[host] = moment + downtime
        spec = f"restart:{host}@{moment:.3f}s+{downtime:g}s"
        restarts.append(
            {
                "spec": spec,
                "kind": "restart",
                "host": host,
                "at_seconds": round(moment, 3),
                "duration_seconds": float(downtime),
                "rate_mbit": None,
                "before_start": False,
                "churn": True,
            }
        )
    return {
        "mtbf_seconds": float(mtbf),
        "downtime_seconds": float(downtime),
        "until_seconds": float(until),
        "seed": seed,
        "min_peers": floor,
        "hosts": candidates,
        "leaves": len(restarts),
        "dropped": dropped,
        "restarts": restarts,
    }


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


def testbed_unapplied_faults(timeline: list[dict[str, Any]]) -> list[str]:
    """A warning for each planned fault that did not happen (skipped, failed, still planned or unknown): the
    run is then not the experiment its plan says (a churn run whose restarts came after the training ended).

    >>> testbed_unapplied_faults([{"spec": "restart:peer-02@30s", "status": "skipped",
    ...                            "detail": "the trainer had ended before the fault was due"},
    ...                           {"spec": "kill:peer-03@5s", "status": "applied"}])
    ['fault restart:peer-02@30s was not applied (skipped: the trainer had ended before the fault was due)']
    """
    return [
        f"fault {f['spec']} was not applied ({f.get('status')}: {f.get('detail') or 'no detail'})"
        for f in timeline
        if f.get("status") not in ("applied", "healed")
    ]


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
