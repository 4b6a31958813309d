"""The compute a dilated run received against the calibration it was planned from, measured from its steps.

A dilated local run gives each container the CPU share that should make it train at its VM's calibrated rate
/ D (docs/compute-calibration.md), with headroom, and its trainer paces each step to the plan
(trainer/loop.py, ``Pace``). Whether the run got its plan is a measurement of the run: each trainer's
summary.json carries ``compute_received`` (trainer/stats.py: over its steps after the warm-up without
averaging, the samples, the compute-and-optimizer seconds, the training thread's CPU seconds and, paced, the
seconds the plan gives them), and this module turns it into a ratio per peer and for the run (``basis``):

- **held**: a paced run's steps' planned seconds over the seconds they took: 1 where the pacing held every
  step, below 1 where the CPU ran slower than the headroom covers.
- **step rate**: a run not paced whose trainer is alone in its container and does not average (baseline,
  solo): the steps' samples/s x D over the host's modelled rate (its calibrated samples/s).
- **CPU speed**: a run not paced whose container's quota is shared with the strategy's own processes by
  design (Hivemind's DHT, p2pd and averagers; the collectives' threads): samples per CPU second of the
  training thread over this machine's one-thread rate the plan used.

Beside the ratio each peer carries the other two measures (``step_rate_ratio``, ``cpu_speed_ratio``). The
run's ratio is the mean of its peers'; ``within`` says whether every peer's is within the limit (by default
``COMPUTE_LIMIT``; a grid sets its own and reruns a run outside it, controller/grid/runner.py).
"""

from __future__ import annotations

import statistics
from typing import Any

#: how far a run's received compute may stray from the calibration before the grid runs it again
COMPUTE_LIMIT = 0.05
#: strategies whose trainer is alone in its container and whose steps carry no communication
ALONE = ("baseline", "solo")


def testbed_received_compute(
    entries: list[dict[str, Any]],
    plan: dict[str, dict[str, Any]],
    compute: dict[str, Any] | None,
    time_dilation: float,
    strategy: str,
    limit: float = COMPUTE_LIMIT,
) -> dict[str, Any] | None:
    """experiment.json's ``received_compute``: per peer and for the run, the compute received over the
    calibration's (None where the run followed no calibration: linear model, VMs, SmallCNN).

    ``entries`` are testbed_read_summaries' (``peer``, ``summary``); a baseline's one entry is named after
    its directory, ``baseline``, and stands for the plan's one host.

    >>> plan = {peer: {"modelled_samples_per_second": 200.0} for peer in ("peer-01", "peer-02")}
    >>> compute = {"local_one_thread_rate": 100.0}
    >>> def entry(peer, samples, seconds, cpu):
    ...     received = {"steps": 10, "samples": samples, "seconds": seconds, "cpu_seconds": cpu}
    ...     return {"peer": peer, "summary": {"compute_received": received}}
    >>> solo = testbed_received_compute([entry("peer-01", 320, 8.0, 3.2), entry("peer-02", 320, 7.6, 3.3)],
    ...                                 plan, compute, 5.0, "solo")
    >>> solo["basis"], solo["peers"]["peer-01"]["ratio"], solo["peers"]["peer-02"]["ratio"], solo["ratio"]
    ('step rate', 1.0, 1.0526, 1.0263)
    >>> solo["within"], solo["outside"]
    (False, ['peer-02'])
    >>> testbed_received_compute([entry("peer-01", 320, 9.0, 3.2)], plan, compute, 5.0, "hivemind")["ratio"]
    1.0
    >>> paced = entry("peer-01", 320, 8.4, 3.0)
    >>> paced["summary"]["compute_received"].update(target_seconds=8.0, paced_seconds=1.2)
    >>> held = testbed_received_compute([paced], plan, compute, 5.0, "solo")
    >>> held["basis"], held["ratio"], held["peers"]["peer-01"]["step_rate_ratio"]
    ('held', 0.9524, 0.9524)
    >>> testbed_received_compute([], plan, None, 1.0, "baseline") is None
    True
    """
    if not compute:
        return None
    hosts = list(plan)
    one_thread = float(compute["local_one_thread_rate"])
    peers: dict[str, dict[str, Any]] = {}
    for entry in entries:
        host = entry["peer"] if entry["peer"] in plan else (hosts[0] if len(hosts) == 1 else None)
        received = (entry.get("summary") or {}).get("compute_received")
        if host is None or not received or not plan[host].get("modelled_samples_per_second"):
            continue
        modelled = float(plan[host]["modelled_samples_per_second"])
        samples, seconds, cpu = received["samples"], received["seconds"], received["cpu_seconds"]
        step_rate = samples / seconds * time_dilation if seconds > 0 else None
        cpu_rate = samples / cpu if cpu > 0 else None
        step_ratio = None if step_rate is None else step_rate / modelled
        cpu_ratio = None if cpu_rate is None else cpu_rate / one_thread
        held = received.get("target_seconds")
        if held:
            basis, ratio = "held", held / seconds if seconds > 0 else None
        else:
            basis = "step rate" if strategy in ALONE else "CPU speed"
            ratio = step_ratio if basis == "step rate" else cpu_ratio
        if ratio is None:
            continue
        peers[host] = {
            "ratio": round(ratio, 4),
            "step_rate_ratio": None if step_ratio is None else round(step_ratio, 4),
            "cpu_speed_ratio": None if cpu_ratio is None else round(cpu_ratio, 4),
            "modelled_samples_per_second": round(step_rate, 3) if step_rate else None,
            "calibrated_samples_per_second": modelled,
            "samples_per_cpu_second": round(cpu_rate, 3) if cpu_rate else None,
            "steps": received["steps"],
            "basis": basis,
            "paced_seconds": received.get("paced_seconds"),
        }
    if not peers:
        return None
    outside = sorted(host for host, peer in peers.items() if abs(peer["ratio"] - 1) > limit)
    return {
        "basis": "/".join(sorted({peer["basis"] for peer in peers.values()})),
        "ratio": round(statistics.fmean(peer["ratio"] for peer in peers.values()), 4),
        "limit": limit,
        "within": not outside,
        "outside": outside,
        "one_thread_rate": one_thread,
        "peers": peers,
    }


def testbed_received_compute_line(received: dict[str, Any] | None) -> list[str]:
    """The playbook summary's line on it (none where the run followed no calibration).

    >>> testbed_received_compute_line({"basis": "step rate", "ratio": 0.97, "limit": 0.05, "within": True,
    ...     "outside": [], "peers": {"a": {"ratio": 0.96}, "b": {"ratio": 0.98}}})
    ['compute received against the calibration (step rate): 0.97 (peers 0.96-0.98), within the 5% limit']
    """
    if not received:
        return []
    ratios = [peer["ratio"] for peer in received["peers"].values()]
    spread = f" (peers {min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    verdict = (
        f"within the {received['limit']:.0%} limit"
        if received["within"]
        else f"OUTSIDE the {received['limit']:.0%} limit ({', '.join(received['outside'])})"
    )
    return [
        f"compute received against the calibration ({received['basis']}): {received['ratio']:.2f}{spread}, "
        + verdict
    ]
