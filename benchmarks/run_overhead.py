"""Where a run's time goes: set-up, the peers' start, training, fetch and summary.

Reads what `trainer grid` keeps of every playbook run (ansible-runner's job events under
``RESULTS/grid-<name>.runner/artifacts/<run>/job_events/``: every play's and task's start on the controller's
clock, the same timings Ansible's profile_tasks callback prints) and each run's results (the start barrier's
release in ``started.json``, the last step in ``steps.csv``), and prints per run and in total:

- **set-up**: from the playbook's start to the start of the play that runs the peers (validation, containers,
  firewall, Ceph, monitoring, the trainer's install, shaping, the bandwidth and CPU probes, faults);
- **to barrier**: from that play's start to the start barrier's release (configure and start the peers, the
  calibration wait, the peers' imports and their DHT);
- **training**: from the barrier's release to the last step of the last peer;
- **after**: from there to the playbook's end (the peers' shutdown, fetch, experiment.json and summary);
- **overhead**: wall / training.

Then the plays and tasks that took longest over all runs. With ``--grid`` it first runs the grid.

    python benchmarks/run_overhead.py results/smoke                      # runs a grid already wrote
    python benchmarks/run_overhead.py --grid grids/smoke.yml --results-dir /tmp/smoke   # run it, then read

Times on the controller's clock and the hosts' (the same clock on the local cluster; on VMs, as far apart as
their clocks are: experiment.json's ``clocks``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiment.results import read_steps  # noqa: E402

RUN_PLAY = "Run the peers or the baseline"  # playbooks/experiment.yml: the play that starts the peers
IDENT = re.compile(r"^(?P<experiment>.+)-\d{8}T\d{6}-\d+$")  # trainer grid's ansible-runner ident


@dataclass
class Run:
    ident: str
    experiment_id: str
    start: float
    end: float
    plays: list[tuple[str, float]] = field(default_factory=list)  # (name, seconds)
    tasks: list[tuple[str, float]] = field(default_factory=list)
    run_play_start: float | None = None
    barrier: float | None = None
    last_step: float | None = None

    @property
    def phases(self) -> dict[str, float | None]:
        wall = self.end - self.start
        if self.run_play_start is None or self.barrier is None or self.last_step is None:
            return {"wall": wall, "set-up": None, "to barrier": None, "training": None, "after": None}
        return {
            "wall": wall,
            "set-up": self.run_play_start - self.start,
            "to barrier": self.barrier - self.run_play_start,
            "training": self.last_step - self.barrier,
            "after": self.end - self.last_step,
        }


def _time(created: str) -> float:
    return datetime.datetime.fromisoformat(created).timestamp()


def read_events(directory: Path) -> list[dict[str, Any]]:
    events = []
    for path in directory.glob("*.json"):
        try:
            events.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(events, key=lambda event: event.get("counter", 0))


def durations(marks: list[tuple[str, float]], end: float) -> list[tuple[str, float]]:
    """(name, seconds until the next mark or ``end``) for time-ordered (name, start) marks.

    >>> durations([("a", 0.0), ("b", 2.5), ("a", 3.0)], 10.0)
    [('a', 2.5), ('b', 0.5), ('a', 7.0)]
    """
    return [
        (name, (marks[i + 1][1] if i + 1 < len(marks) else end) - start)
        for i, (name, start) in enumerate(marks)
    ]


def read_run(artifact: Path, results: Path) -> Run | None:
    """One playbook run from its job events and its experiment's results; None without events."""
    events = read_events(artifact / "job_events")
    stamped = [e for e in events if e.get("created")]
    if not stamped:
        return None
    match = IDENT.match(artifact.name)
    run = Run(
        artifact.name,
        match["experiment"] if match else artifact.name,
        _time(stamped[0]["created"]),
        _time(stamped[-1]["created"]),
    )
    plays = [
        (e["event_data"].get("play", "?"), _time(e["created"]))
        for e in stamped
        if e["event"] == "playbook_on_play_start"
    ]
    tasks = [
        (f"{e['event_data'].get('play', '?')} / {e['event_data'].get('task', '?')}", _time(e["created"]))
        for e in stamped
        if e["event"] in ("playbook_on_task_start", "playbook_on_play_start")
    ]
    run.plays = durations(plays, run.end)
    run.tasks = [(name, seconds) for name, seconds in durations(tasks, run.end) if " / " in name]
    run.tasks = [(name.split(" / ", 1)[1] if name.endswith(" / ?") else name, s) for name, s in run.tasks]
    run.run_play_start = next((start for name, start in plays if name == RUN_PLAY), None)
    peers = [p for p in (results / run.experiment_id).glob("*/started.json")]
    released = []
    for started in peers:
        try:
            released.append(float(json.loads(started.read_text())["barrier_released_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    last_steps = [
        float(rows[-1]["timestamp"])
        for p in peers
        if (rows := read_steps(p.parent)) and rows[-1].get("timestamp")
    ]
    run.barrier = min(released) if released else None
    run.last_step = max(last_steps) if last_steps else None
    return run


def read_runs(results: Path) -> list[Run]:
    runs = []
    for artifacts in sorted(results.glob("grid-*.runner/artifacts")):
        for artifact in sorted(p for p in artifacts.iterdir() if p.is_dir()):
            if (run := read_run(artifact, results)) is not None:
                runs.append(run)
    return sorted(runs, key=lambda run: run.start)


def _cell(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.1f}"


def table(runs: list[Run], top: int = 8) -> list[str]:
    names = ("wall", "set-up", "to barrier", "training", "after")
    lines = [f"{'run':<52} " + " ".join(f"{n:>10}" for n in names) + f" {'overhead':>9}"]
    totals = dict.fromkeys(names, 0.0)
    for run in runs:
        phases = run.phases
        ratio = phases["wall"] / phases["training"] if phases["training"] else None
        lines.append(
            f"{run.ident[:52]:<52} " + " ".join(_cell(phases[n], 10) for n in names) + f" {_cell(ratio, 8)}x"
        )
        for name in names:
            totals[name] += phases[name] or 0.0
    if runs:
        ratio = totals["wall"] / totals["training"] if totals["training"] else None
        lines.append(
            f"{'total (' + str(len(runs)) + ' runs)':<52} "
            + " ".join(_cell(totals[n], 10) for n in names)
            + f" {_cell(ratio, 8)}x"
        )
        lines.append(
            f"overhead per run (wall - training): {(totals['wall'] - totals['training']) / len(runs):.1f} s"
        )
    for label, rows in (
        ("plays", [p for r in runs for p in r.plays]),
        ("tasks", [t for r in runs for t in r.tasks]),
    ):
        summed: dict[str, float] = {}
        for name, seconds in rows:
            summed[name] = summed.get(name, 0.0) + seconds
        lines.append(f"\nslowest {label} over all runs (seconds, summed):")
        lines += [
            f"{seconds:>9.1f}  {name}"
            for name, seconds in sorted(summed.items(), key=lambda kv: -kv[1])[:top]
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, help="a results directory `trainer grid` wrote")
    parser.add_argument("--grid", type=Path, help="run this grid file first (into --results-dir)")
    parser.add_argument("--results-dir", type=Path, help="with --grid: where the grid writes")
    parser.add_argument("--only", default="", help="with --grid: trainer grid's --only")
    parser.add_argument("--repeat", type=int, help="with --grid: trainer grid's --repeat")
    parser.add_argument("--top", type=int, default=8, help="how many slowest plays and tasks to list")
    args = parser.parse_args(argv)
    results = args.results_dir if args.grid else args.results
    if results is None:
        parser.error("give a results directory, or --grid FILE --results-dir DIR")
    if args.grid:
        command = [sys.executable, "-m", "trainer", "grid", str(args.grid), "--results-dir", str(results)]
        command += ["--only", args.only] if args.only else []
        command += ["--repeat", str(args.repeat)] if args.repeat else []
        if subprocess.run(command, cwd=REPO, check=False).returncode != 0:
            print("[run-overhead] the grid did not complete; reading what it wrote", flush=True)
    runs = read_runs(results)
    if not runs:
        print(f"run_overhead: no playbook runs under {results}/grid-*.runner/artifacts", file=sys.stderr)
        return 2
    print("\n".join(table(runs, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
