"""A trainer host's poll output as a state mapping, a one-line progress report and what went wrong (the
trainer_service role's filters, plugins/filter/trainer_progress.py)."""

from __future__ import annotations

import ast
import json
from typing import Any

# steps.csv column -> label in the progress line
_REPORTED_COLUMNS = {"step": "step", "hivemind_epoch": "epoch", "loss": "loss", "peers": "peers"}


def testbed_unit_state(lines: list[str]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` lines (``systemctl show`` plus HEADER/LAST of steps.csv) into a mapping.

    ``last_step`` holds the last steps.csv row keyed by its header (empty before the first step).

    >>> s = testbed_unit_state(["ActiveState=active", "HEADER=step,loss", "LAST=3,0.5"])
    >>> s["ActiveState"], s["last_step"]
    ('active', {'step': '3', 'loss': '0.5'})
    >>> testbed_unit_state(["ActiveState=active", "HEADER=step,loss", "LAST=step,loss"])["last_step"]
    {}
    """
    state: dict[str, Any] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            state[key.strip()] = value.strip()
    header = [c for c in state.get("HEADER", "").split(",") if c]
    last = state.get("LAST", "").split(",")
    has_row = bool(header) and len(last) == len(header) and last != header
    state["last_step"] = dict(zip(header, last, strict=True)) if has_row else {}
    return state


def testbed_progress_line(host: Any) -> str:
    """``peer-01  active  step 120  epoch 3  loss 1.2300  peers 4`` for one host: an item of ``dict2items``
    over the hosts' states (``key`` its name, ``value`` its testbed_unit_state).

    >>> host = {"key": "peer-01", "value": {"ActiveState": "active",
    ...         "last_step": {"step": "120", "hivemind_epoch": "3", "loss": "1.23", "peers": "4"}}}
    >>> testbed_progress_line(host)
    'peer-01  active   step 120  epoch 3  loss 1.2300  peers 4'
    """
    name = host["key"]
    state = host.get("value") or {}
    active = state.get("ActiveState", "unknown")
    if active not in ("active", "activating") and state.get("Result"):
        active = f"{active} ({state.get('Result')}, exit {state.get('ExecMainStatus', '?')})"
    row = state.get("last_step") or {}
    if not row:
        return f"{name:<8} {active:<8} no step yet (start-up or start barrier)"
    parts = []
    for column, label in _REPORTED_COLUMNS.items():
        value = row.get(column, "")
        if column == "loss" and value:
            value = f"{float(value):.4f}"
        parts.append(f"{label} {value}")
    return f"{name:<8} {active:<8} " + "  ".join(parts)


#: the unit states of a trainer that has not ended
_RUNNING = ("active", "activating", "deactivating", "reloading")


def testbed_failed_hosts(states: dict[str, dict[str, Any]]) -> list[str]:
    """The hosts whose trainer ended without completing (no summary.json, or one not complete), in order.

    >>> testbed_failed_hosts({
    ...     "peer-01": {"ActiveState": "active"},
    ...     "peer-02": {"ActiveState": "failed", "SUMMARY": '{"complete": false, "exit_reason": "error"}'},
    ...     "peer-03": {"ActiveState": "inactive", "SUMMARY": '{"complete": true}'},
    ...     "peer-04": {"ActiveState": "failed", "SUMMARY": ""}})
    ['peer-02', 'peer-04']
    """
    failed = []
    for host, state in states.items():
        if state.get("ActiveState", "unknown") in _RUNNING:
            continue
        try:
            summary = json.loads(state.get("SUMMARY") or "{}")
        except ValueError:
            summary = {}
        if not summary.get("complete", False):
            failed.append(host)
    return failed


def testbed_run_problem(outcome: dict[str, Any], summary: dict[str, Any] | None, timeout: Any = None) -> str:
    """Why a host's run is not complete ('' when it is), from wait.yml's outcome and the host's summary.json,
    with the trainer's own one-line error where it wrote one.

    >>> testbed_run_problem({"timed_out": False, "result": "success", "exit_status": 0}, {"complete": True})
    ''
    >>> summary = {"complete": False, "exit_reason": "start_timeout", "exit_detail": "rendezvous at ..."}
    >>> testbed_run_problem({"timed_out": False, "result": "exit-code", "exit_status": 3}, summary)
    'exit_reason start_timeout (exit status 3): rendezvous at ...'
    >>> testbed_run_problem({"timed_out": False, "result": "exit-code", "exit_status": 1}, {})
    'no summary.json (unit result exit-code, exit status 1)'
    >>> testbed_run_problem({"timed_out": "True"}, {"complete": False, "exit_reason": "signal"}, 60)
    'still running after the 60 s timeout, stopped (exit_reason signal)'
    >>> stopped = {"timed_out": False, "exit_status": 0, "stopped_for": ["peer-02"]}
    >>> testbed_run_problem(stopped, {"complete": False, "exit_reason": "signal"})
    'stopped because peer-02 failed (exit_reason signal)'
    """
    timed_out = str(outcome.get("timed_out", False)).lower() == "true"
    status = f"exit status {outcome.get('exit_status', '?')}"
    reason = (summary or {}).get("exit_reason", "no summary.json")
    if timed_out:
        return f"still running after the {timeout} s timeout, stopped (exit_reason {reason})"
    stopped_for = outcome.get("stopped_for") or []
    if isinstance(stopped_for, str):  # a list that came through a template as its text
        stopped_for = ast.literal_eval(stopped_for) if stopped_for.lstrip().startswith("[") else [stopped_for]
    if stopped_for and not (summary or {}).get("complete", False):
        return f"stopped because {', '.join(stopped_for)} failed (exit_reason {reason})"
    if not summary:
        return f"no summary.json (unit result {outcome.get('result', '?')}, {status})"
    if not summary.get("complete", False):
        detail = summary.get("exit_detail")
        return f"exit_reason {reason} ({status})" + (f": {detail}" if detail else "")
    return ""


def testbed_run_problems(hosts: list[Any]) -> list[str]:
    """``host: problem`` for every host (hostvars) whose trainer_service_problem is set and not empty.

    >>> a = {"inventory_hostname": "a", "trainer_service_problem": "x"}
    >>> b = {"inventory_hostname": "b", "trainer_service_problem": ""}
    >>> testbed_run_problems([a, b, {"inventory_hostname": "c"}])
    ['a: x']
    """
    problems = []
    for host in hosts:
        problem = host.get("trainer_service_problem") or ""
        if problem:
            problems.append(f"{host['inventory_hostname']}: {problem}")
    return problems


def testbed_join_multiaddr(address: str, multiaddrs: list[str], port: Any) -> str:
    """The multiaddr other peers join the bootstrap peer at: its cluster address, its port and its peer id.

    The bootstrap peer lists every address it listens on (loopback, container addresses, ...); the one other
    hosts can reach is its cluster address, so that one is used, with the peer id taken from any line.
    Returns '' when no line carries a peer id.

    >>> testbed_join_multiaddr("10.0.0.5", ["/ip4/127.0.0.1/tcp/31337/p2p/QmAbc"], 31337)
    '/ip4/10.0.0.5/tcp/31337/p2p/QmAbc'
    >>> testbed_join_multiaddr("10.0.0.5", [], 31337)
    ''
    """
    for line in multiaddrs:
        _, sep, peer_id = line.strip().rpartition("/p2p/")
        if sep and peer_id:
            return f"/ip4/{address}/tcp/{int(port)}/p2p/{peer_id}"
    return ""
