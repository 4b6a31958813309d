"""An experiment's fetched results, read on the controller, and its printed summary (playbooks/report.yml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from experiment.record import experiment_record
from experiment.results import COMPONENTS, SUMMARY_FILE, read_summary

#: the step-time components the printed summary shows (the optimizer's own time is the step less the others)
PRINTED_COMPONENTS = tuple(name for name in COMPONENTS if name != "optimizer_seconds")
# Peers declared equal must receive CPU within this fraction of each other (docs/fair-cpu.md).
FAIR_CPU_SPREAD = 0.10
# Peers declared equal ran at equal speed when their samples/s over the training loop are within this fraction
# ("equal peers at equal speed", docs/fair-cpu.md).
FAIR_SPEED_SPREAD = 0.10
# A CPU probe that started later than this share of its window after the common start is named in a warning.
LATE_PROBE_FRACTION = 0.1
# The CPU probe's window in seconds (trainer cpuprobe's default, playbooks/cpu.yml).
PROBE_SECONDS = 5.0
# Hosts' clocks further apart than this make the probe's common start and the fault timeline unreliable: the
# late-probe tolerance above, in seconds (playbooks/reach.yml measures the offsets at the run's start).
CLOCK_SPREAD_LIMIT_S = LATE_PROBE_FRACTION * PROBE_SECONDS


def testbed_read_summaries(results_dir: str, run_dirs: list[str]) -> list[dict[str, Any]]:
    """One entry per run directory: ``peer``, ``complete``, ``problem`` ('' when complete) and ``summary``.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "peer-01").mkdir()
    >>> _ = (d / "peer-01" / "summary.json").write_text('{"complete": false, "exit_reason": "error"}')
    >>> entries = testbed_read_summaries(str(d), ["peer-01", "peer-02"])
    >>> [(e["peer"], e["complete"], e["problem"]) for e in entries]
    [('peer-01', False, 'peer-01: exit_reason error'), ('peer-02', False, 'peer-02: no summary.json fetched')]
    """
    entries = []
    for name in run_dirs:
        summary = read_summary(Path(results_dir) / name)
        if summary is None:
            entries.append({"peer": name, "complete": False, "problem": f"{name}: no {SUMMARY_FILE} fetched"})
            continue
        complete = bool(summary.get("complete"))
        problem = "" if complete else f"{name}: exit_reason {summary.get('exit_reason')}"
        entries.append({"peer": name, "complete": complete, "problem": problem, "summary": summary})
    return entries


def testbed_experiment_record(document: dict[str, Any]) -> dict[str, Any]:
    """experiment.json's document (playbooks/report.yml), checked against its schema and put in the schema's
    order (experiment/record.py): a field the schema does not know, or of another type, fails the run."""
    return experiment_record(**document)


def testbed_host_records(
    plan: dict[str, dict[str, Any]], hostvars: Any, entries: list[dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """experiment.json's ``hosts``: the plan per host, the kernel the run play saw, the link shaping applied
    and removed (with the user-space delay's counts), the CPU the host's trainer received (its summary's
    ``cpu_received``) and the CPU it received under full load before the run (``cpu_probe``,
    playbooks/cpu.yml; None where none ran)."""
    received = {e["peer"]: (e.get("summary") or {}).get("cpu_received") for e in entries or []}
    records = {}
    for host, entry in plan.items():
        record = dict(entry)
        facts = hostvars[host]
        run = facts.get("testbed_run_record") or {}
        record["kernel"] = run.get("kernel", "")
        if facts.get("link_shaping_applied"):
            record["link"] = {
                **facts["link_shaping_applied"],
                "after_run": facts.get("link_shaping_removed"),
                # the user-space delay's packets and drops as its queue counted them (None: netem, no delay)
                "delay_counts": facts.get("link_shaping_delay_counts"),
            }
        record["cpu_received"] = received.get(host) or received.get("baseline")  # a baseline: "baseline"
        record["cpu_probe"] = facts.get("testbed_cpu_probe") or None
        records[host] = record
    return records


def testbed_cpu_fairness(
    entries: list[dict[str, Any]], plan: dict[str, dict[str, Any]], probes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Whether peers declared equal were served equally, per group of equal vCPUs (docs/fair-cpu.md).

    ``probe_cores``: each peer's cores under full load, every peer at once (playbooks/cpu.yml), and their
    ``probe_spread`` ((max - min) / max): the fairness measure, a warning above 10 %. ``cores_used``: the CPU
    seconds per wall second over the run, and their ``spread``, recorded beside it; they also fall when a peer
    waits, so they decide the warning only where no probe ran. A probe that started late is named too.

    >>> def entry(peer, cores):
    ...     return {"peer": peer, "summary": {"cpu_received": {"cores_used": cores}}}
    >>> plan = {p: {"vcpus": 4} for p in ("peer-01", "peer-02", "peer-03")}
    >>> entries = [entry("peer-01", 0.5), entry("peer-02", 0.48), entry("peer-03", 0.3)]
    >>> fair = testbed_cpu_fairness(entries, plan)
    >>> fair["groups"]["4"]["spread"], fair["warnings"][0][:45]
    (0.4, 'peers declared with 4 vCPUs were served unequ')
    >>> loads = zip(plan, (0.44, 0.43, 0.44))
    >>> probes = {p: {"cores_used": c, "seconds": 5, "late_seconds": 0} for p, c in loads}
    >>> fair = testbed_cpu_fairness(entries, plan, probes)
    >>> fair["groups"]["4"]["probe_spread"], fair["groups"]["4"]["spread"], fair["warnings"]
    (0.0227, 0.4, [])
    """
    run_cores: dict[str, dict[str, float]] = {}
    for entry in entries:
        cpu = (entry.get("summary") or {}).get("cpu_received") or {}
        host = entry["peer"] if entry["peer"] in plan else next(iter(plan), entry["peer"])
        if cpu.get("cores_used") is None or host not in plan:
            continue
        run_cores.setdefault(str(plan[host]["vcpus"]), {})[entry["peer"]] = float(cpu["cores_used"])
    probe_cores: dict[str, dict[str, float]] = {}
    document: dict[str, Any] = {"limit": FAIR_CPU_SPREAD, "groups": {}, "warnings": []}
    for host, probe in (probes or {}).items():
        if not probe or host not in plan:
            continue
        probe_cores.setdefault(str(plan[host]["vcpus"]), {})[host] = float(probe["cores_used"])
        late = float(probe.get("late_seconds") or 0.0)
        if late > LATE_PROBE_FRACTION * float(probe["seconds"]):
            document["warnings"].append(
                f"the CPU probe on {host} started {late:.1f} s late: its window overlapped the others' less"
            )
    for vcpus in sorted({*run_cores, *probe_cores}, key=float):
        group: dict[str, Any] = {}
        if vcpus in probe_cores:
            group.update(probe_cores=probe_cores[vcpus], probe_spread=_spread(probe_cores[vcpus]))
        if vcpus in run_cores:
            group.update(cores_used=run_cores[vcpus], spread=_spread(run_cores[vcpus]))
        document["groups"][vcpus] = group
        judged = probe_cores.get(vcpus) or run_cores.get(vcpus) or {}
        spread = _spread(judged)
        if len(judged) > 1 and spread > FAIR_CPU_SPREAD:
            low, high = min(judged, key=judged.__getitem__), max(judged, key=judged.__getitem__)
            how = "under equal full load (CPU probe)" if vcpus in probe_cores else "over the run"
            document["warnings"].append(
                f"peers declared with {vcpus} vCPUs were served unequally {how}: {low} received "
                f"{judged[low]:.3f} cores, {high} {judged[high]:.3f} ({spread:.0%} apart, limit "
                f"{FAIR_CPU_SPREAD:.0%}); compare their timings with care"
            )
    return document


def testbed_speed_fairness(entries: list[dict[str, Any]], plan: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether peers declared equal trained at equal speed, per group of two or more equal vCPUs: each peer's
    ``samples_per_second`` over its training loop, their ``spread`` ((max - min) / max), whether it is within
    the limit, and for each peer more than the limit below the group's fastest what its rounds say it lost
    time to (``slow``: its failed rounds by cause, or ``no failed round``). Equal CPU (the probe) with unequal
    speed is the collaboration's doing, not the testbed's.

    >>> def entry(peer, rate, failed=None):
    ...     return {"peer": peer, "summary": {"samples_per_second": rate, "rounds_failed_by_cause": failed}}
    >>> plan = {p: {"vcpus": 2} for p in ("peer-01", "peer-02", "peer-03")}
    >>> speed = testbed_speed_fairness([entry("peer-01", 16.0), entry("peer-02", 15.2),
    ...                                 entry("peer-03", 8.0, {"behind": 1})], plan)
    >>> group = speed["groups"]["2"]
    >>> group["spread"], group["within_limit"], group["slow"]
    (0.5, False, {'peer-03': 'behind 1'})
    >>> speed["lines"][0][:63]
    'speed of equal peers (2 vCPUs): 8.00-16.00 measured samples/s, '
    >>> speed["lines"][0][63:]
    '50% apart (limit 10%); slower: peer-03 (behind 1)'
    >>> def timed(peer, rate, compute):
    ...     summary = {"samples_per_second": rate, "samples": 320, "components": {"compute_seconds":
    ...                {"total": compute}}}
    ...     return {"peer": peer, "summary": summary}
    >>> speed = testbed_speed_fairness([timed("peer-01", 16.0, 8.0), timed("peer-02", 8.0, 8.2)], plan)
    >>> speed["groups"]["2"]["compute_spread"], speed["lines"][0].split("; ")[-1]
    (0.0244, 'computing 2% apart (the rest is time waiting for averaging)')
    """
    rates: dict[str, dict[str, float]] = {}
    computing: dict[str, dict[str, float]] = {}
    causes: dict[str, str] = {}
    for entry in entries:
        peer, summary = entry["peer"], entry.get("summary") or {}
        if peer not in plan or summary.get("samples_per_second") is None:
            continue
        rates.setdefault(str(plan[peer]["vcpus"]), {})[peer] = float(summary["samples_per_second"])
        compute = ((summary.get("components") or {}).get("compute_seconds") or {}).get("total")
        if compute and summary.get("samples"):
            computing.setdefault(str(plan[peer]["vcpus"]), {})[peer] = float(summary["samples"]) / compute
        by_cause = summary.get("rounds_failed_by_cause") or {}
        causes[peer] = ", ".join(f"{cause} {n}" for cause, n in sorted(by_cause.items())) or "no failed round"
    document: dict[str, Any] = {"limit": FAIR_SPEED_SPREAD, "groups": {}, "lines": []}
    for vcpus in sorted(rates, key=float):
        group_rates = rates[vcpus]
        if len(group_rates) < 2:
            continue
        fastest, spread = max(group_rates.values()), _spread(group_rates)
        threshold = (1 - FAIR_SPEED_SPREAD) * fastest
        slow = {peer: causes[peer] for peer, rate in group_rates.items() if rate < threshold}
        document["groups"][vcpus] = {
            "samples_per_second": {peer: round(rate, 3) for peer, rate in group_rates.items()},
            "spread": spread,
            "within_limit": spread <= FAIR_SPEED_SPREAD,
            "slow": slow,
        }
        # the same peers' samples per second of computing: the testbed's share of the spread (the rest is
        # the collaboration's: time waiting for averaging)
        group_computing = computing.get(vcpus) or {}
        if len(group_computing) == len(group_rates):
            document["groups"][vcpus]["compute_samples_per_second"] = {
                peer: round(rate, 3) for peer, rate in group_computing.items()
            }
            document["groups"][vcpus]["compute_spread"] = _spread(group_computing)
        line = (
            f"speed of equal peers ({vcpus} vCPUs): {min(group_rates.values()):.2f}-{fastest:.2f} measured "
            "samples/s, "
            f"{spread:.0%} apart (limit {FAIR_SPEED_SPREAD:.0%})"
        )
        if slow:
            line += "; slower: " + ", ".join(f"{peer} ({why})" for peer, why in slow.items())
        if "compute_spread" in document["groups"][vcpus]:
            line += (
                f"; computing {document['groups'][vcpus]['compute_spread']:.0%} apart (the rest is time "
                "waiting for averaging)"
            )
        document["lines"].append(line)
    return document


def _spread(cores: dict[str, float]) -> float:
    top, bottom = max(cores.values()), min(cores.values())
    return round((top - bottom) / top, 4) if top > 0 else 0.0


def _number(value: Any, digits: int) -> str:
    if value is None or value == "":
        return "-"
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def testbed_summary_table(
    entries: list[dict[str, Any]], experiment_id: str, results_dir: str, probes: dict[str, Any] | None = None
) -> list[str]:
    """Lines of the per-peer summary table (a list, so that Ansible prints one line each): ``cores`` used
    over the run, ``thr %`` of its CFS periods throttled, ``load``: the cores it received under full load
    before the run (the CPU probe; ``-`` where none ran).

    >>> s = {"steps": 10, "samples_per_second": 12.5, "final_loss": 0.5, "exit_reason": "max_steps",
    ...      "rounds_ok": 3, "rounds_failed": 0, "components": {"step_seconds": {"mean": 0.25}}}
    >>> lines = testbed_summary_table([{"peer": "peer-01", "summary": s}], "x", "/r", {"peer-01": None})
    >>> lines[2].split()[:4], lines[2].split()[-2:]
    (['peer-01', '10', '12.50', '0.250'], ['-', 'max_steps'])
    """
    header = (
        f"{'peer':<10} {'steps':>6} {'samples/s':>10} {'step s':>8} {'data s':>8} {'compute s':>9} "
        f"{'averag. s':>9} {'rounds ok/failed':>16} {'final loss':>10} {'cores':>6} {'thr %':>5} {'load':>6}"
        "  exit reason"
    )
    lines = [f"Experiment {experiment_id} (results in {results_dir})", header]
    dilation = max(float((e.get("summary") or {}).get("time_dilation") or 1.0) for e in entries or [{}])
    if dilation > 1:
        lines.insert(
            1,
            f"modelled: times are the measured ones / D, rates x D, D = {dilation:.2f} "
            "(both in summary.json)",
        )
    for entry in entries:
        summary = entry.get("summary")
        if summary is None:
            lines.append(f"{entry['peer']:<10} no results")
            continue
        if dilation > 1:
            summary = {**summary, **(summary.get("modelled") or {})}
        components = summary.get("components") or {}
        means = [_number((components.get(name) or {}).get("mean"), 3) for name in PRINTED_COMPONENTS]
        rounds = f"{summary.get('rounds_ok', '-')}/{summary.get('rounds_failed', '-')}"
        rate = _number(summary.get("samples_per_second"), 2)
        cpu = summary.get("cpu_received") or {}
        throttled = cpu.get("throttled_fraction")
        probe = (probes or {}).get(entry["peer"]) or {}
        lines.append(
            f"{entry['peer']:<10} {summary.get('steps', '-'):>6} {rate:>10} "
            f"{means[0]:>8} {means[1]:>8} {means[2]:>9} {means[3]:>9} {rounds:>16} "
            f"{_number(summary.get('final_loss'), 4):>10} {_number(cpu.get('cores_used'), 3):>6} "
            f"{_number(None if throttled is None else 100 * throttled, 0):>5} "
            f"{_number(probe.get('cores_used'), 3):>6}  {summary.get('exit_reason', '-')}"
        )
    causes = {
        entry["peer"]: ", ".join(f"{cause} {count}" for cause, count in sorted(by_cause.items()))
        for entry in entries
        if (by_cause := (entry.get("summary") or {}).get("rounds_failed_by_cause"))
    }
    if causes:
        listed = "; ".join(f"{peer}: {text}" for peer, text in causes.items())
        lines.append(f"failed rounds by cause: {listed}")
    by_role = cpu_by_role(entries)
    if by_role:
        lines.append(by_role)
    bound = run_bound(entries)
    if bound:
        lines.append(f"bound: {bound} (trainer report names it with the evidence and the knob to turn)")
    return lines


def cpu_by_role(entries: list[dict[str, Any]]) -> str:
    """Where the peers' CPU went over the training, summed over the peers: the training loop's process
    (``trainer``) and the strategy's own (Hivemind: its DHT, p2pd and averagers), from each summary's
    ``cpu_received.process_tree_by_role``; "" when no summary has a process of the strategy's own.

    >>> def entry(**seconds):
    ...     return {"summary": {"cpu_received": {"process_tree_by_role": seconds}}}
    >>> cpu_by_role([entry(trainer=9.0, dht=1.0, p2pd=2.0), entry(trainer=7.0, dht=0.5, p2pd=0.5)])
    'CPU by process (all peers, training): trainer 16.0 s (80%), p2pd 2.5 s (12%), dht 1.5 s (8%)'
    >>> cpu_by_role([entry(trainer=9.0)])
    ''
    """
    sums: dict[str, float] = {}
    for entry in entries:
        split = ((entry.get("summary") or {}).get("cpu_received") or {}).get("process_tree_by_role") or {}
        for role, seconds in split.items():
            sums[role] = sums.get(role, 0.0) + float(seconds)
    everything = sum(sums.values())
    if set(sums) <= {"trainer"} or everything <= 0:
        return ""
    parts = [
        f"{role} {seconds:.1f} s ({seconds / everything:.0%})"
        for role, seconds in sorted(sums.items(), key=lambda item: -item[1])
    ]
    return "CPU by process (all peers, training): " + ", ".join(parts)


def run_bound(entries: list[dict[str, Any]]) -> str:
    """The largest of data loading, compute and averaging in the summed mean step times of all peers, with
    its share (the report splits averaging into communication and coordination and checks for stragglers).

    >>> def entry(data, compute, averaging):
    ...     means = {"data_seconds": data, "compute_seconds": compute, "averaging_seconds": averaging,
    ...              "step_seconds": data + compute + averaging}
    ...     return {"summary": {"components": {k: {"mean": v} for k, v in means.items()}}}
    >>> run_bound([entry(0.1, 0.2, 0.7), entry(0.1, 0.4, 0.5)])
    'averaging 60% of step time'
    """
    sums = dict.fromkeys(("data", "compute", "averaging", "step"), 0.0)
    for entry in entries:
        components = (entry.get("summary") or {}).get("components") or {}
        for part in sums:
            sums[part] += float((components.get(f"{part}_seconds") or {}).get("mean") or 0.0)
    if not sums["step"]:
        return ""
    part = max(("data", "compute", "averaging"), key=sums.__getitem__)
    return f"{part} {sums[part] / sums['step']:.0%} of step time"


def testbed_clock_check(readings: dict[str, list[str]]) -> dict[str, Any]:
    """Every host's clock against the controller's at the run's start, from readings
    "HOST_TIME CONTROLLER_TIME" (epoch seconds; the controller's taken as the command was sent,
    playbooks/reach.yml): the smallest difference of each host's readings (an upper bound: it includes the
    command's way to the host), their spread, and a warning when the spread exceeds ``CLOCK_SPREAD_LIMIT_S``.

    >>> readings = {"peer-01": ["100.5 100.45", "101.0 100.969"], "peer-02": ["101.2 100.0"]}
    >>> check = testbed_clock_check(readings)
    >>> check["offsets_s"], check["spread_s"], check["warnings"][0][:53]
    ({'peer-01': 0.031, 'peer-02': 1.2}, 1.169, "hosts' clocks 1.17 s apart (limit 0.5 s: peer-01 +0.0")
    >>> testbed_clock_check({"peer-01": ["5.03 5.0"], "peer-02": ["5.05 5.0"]})["warnings"]
    []
    >>> testbed_clock_check({"peer-01": ["$(date +%s.%N) 5.0"], "peer-02": ["x 5.05 5.0 y"]})["offsets_s"]
    {'peer-02': 0.05}
    """
    offsets = {}
    for host, lines in sorted(readings.items()):
        # the last two numbers of each line (a connection may add text around them); none: not read
        pairs = [re.findall(r"\d+(?:\.\d+)?", line)[-2:] for line in lines]
        differences = [float(pair[0]) - float(pair[1]) for pair in pairs if len(pair) == 2]
        if differences:
            offsets[host] = round(min(differences), 3)
    values = list(offsets.values())
    spread = round(max(values) - min(values), 3) if values else None
    document: dict[str, Any] = {
        "offsets_s": offsets,
        "spread_s": spread,
        "limit_s": CLOCK_SPREAD_LIMIT_S,
        "warnings": [],
    }
    if spread is not None and spread > CLOCK_SPREAD_LIMIT_S:
        listed = ", ".join(f"{host} {value:+.2f} s" for host, value in offsets.items())
        document["warnings"].append(
            f"hosts' clocks {spread:.2f} s apart (limit {CLOCK_SPREAD_LIMIT_S:g} s: {listed}): the CPU "
            "probe's common start and the fault timeline compare times taken on different hosts; keep the "
            "clocks in step (clock_sync_ntp_servers in the inventory installs chrony, docs/real-vms.md)"
        )
    return document
