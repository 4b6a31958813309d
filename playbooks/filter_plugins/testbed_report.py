"""An experiment's fetched results, read on the controller, and its printed summary (playbooks/report.yml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COMPONENTS = ("step_seconds", "data_seconds", "compute_seconds", "averaging_seconds")


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
        path = Path(results_dir) / name / "summary.json"
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            summary = None
        if summary is None:
            entries.append({"peer": name, "complete": False, "problem": f"{name}: no summary.json fetched"})
            continue
        complete = bool(summary.get("complete"))
        problem = "" if complete else f"{name}: exit_reason {summary.get('exit_reason')}"
        entries.append({"peer": name, "complete": complete, "problem": problem, "summary": summary})
    return entries


def testbed_host_records(plan: dict[str, dict[str, Any]], hostvars: Any) -> dict[str, dict[str, Any]]:
    """experiment.json's ``hosts``: the plan per host plus the kernel the run play saw."""
    records = {}
    for host, entry in plan.items():
        record = dict(entry)
        run = hostvars[host].get("testbed_run_record") or {}
        record["kernel"] = run.get("kernel", "")
        records[host] = record
    return records


def _number(value: Any, digits: int) -> str:
    if value is None or value == "":
        return "-"
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def testbed_summary_table(entries: list[dict[str, Any]], experiment_id: str, results_dir: str) -> list[str]:
    """Lines of the per-peer summary table (a list, so that Ansible prints one line each).

    >>> s = {"steps": 10, "samples_per_second": 12.5, "final_loss": 0.5, "exit_reason": "max_steps",
    ...      "rounds_ok": 3, "rounds_failed": 0, "components": {"step_seconds": {"mean": 0.25}}}
    >>> lines = testbed_summary_table([{"peer": "peer-01", "summary": s}], "x", "/r")
    >>> lines[2].split()[:4]
    ['peer-01', '10', '12.50', '0.250']
    """
    header = (
        f"{'peer':<10} {'steps':>6} {'samples/s':>10} {'step s':>8} {'data s':>8} {'compute s':>9} "
        f"{'averag. s':>9} {'rounds ok/failed':>16} {'final loss':>10}  exit reason"
    )
    lines = [f"Experiment {experiment_id} (results in {results_dir})", header]
    for entry in entries:
        summary = entry.get("summary")
        if summary is None:
            lines.append(f"{entry['peer']:<10} no results")
            continue
        components = summary.get("components") or {}
        means = [_number((components.get(name) or {}).get("mean"), 3) for name in COMPONENTS]
        rounds = f"{summary.get('rounds_ok', '-')}/{summary.get('rounds_failed', '-')}"
        rate = _number(summary.get("samples_per_second"), 2)
        lines.append(
            f"{entry['peer']:<10} {summary.get('steps', '-'):>6} {rate:>10} "
            f"{means[0]:>8} {means[1]:>8} {means[2]:>9} {means[3]:>9} {rounds:>16} "
            f"{_number(summary.get('final_loss'), 4):>10}  {summary.get('exit_reason', '-')}"
        )
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "testbed_read_summaries": testbed_read_summaries,
            "testbed_host_records": testbed_host_records,
            "testbed_summary_table": testbed_summary_table,
        }
