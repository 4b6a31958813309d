"""``trainer grid FILE``: list or run every experiment of a grid file (format: controller/grid/spec.py).

trainer grid grids/thesis.yml --dry-run            # every run, its settings and id, and the totals
trainer grid grids/smoke.yml                       # run them (skipping complete ones), one after another
trainer grid grids/thesis.yml --only "strategy == 'baseline' and batch_size == 32" --repeat 1
trainer grid grids/study.yml --results-dir studies/thesis --sitting 2h  # no run ends after 2 h
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from controller.grid.estimate import estimate
from controller.grid.runner import code_revision, format_duration, to_run_again
from controller.grid.spec import NOISE_FLOOR_BLOCK, Grid, GridError, Run, load_grid, matching_runs
from controller.grid.status import GridStatus, experiment_complete

# The repository holding playbooks/ (an editable install); else the working directory.
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent
REPO_ROOT = _PACKAGE_PARENT if (_PACKAGE_PARENT / "playbooks").is_dir() else Path.cwd()
PLAYBOOK_DEFAULT_PEERS = 8  # docs/architecture.md "Experiment playbook variables"


#: the line ``trainer --help`` shows for this command
HELP = "run an experiment grid (resumable)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run (or list with --dry-run) a grid file's experiments through the experiment playbook."
    )
    parser.add_argument("file", type=Path, help="grid file (YAML), e.g. grids/smoke.yml")
    parser.add_argument(
        "--inventory", type=Path, help="Ansible inventory (default: ansible.cfg's, the local cluster)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print every run and the totals; touch no host"
    )
    parser.add_argument(
        "--only",
        metavar="EXPR",
        help="run only runs matching this expression over the settings, 'repeat' and 'block', "
        'e.g. "peers == 2 and local_updates"',
    )
    parser.add_argument(
        "--again",
        metavar="EXPR",
        help="run again the complete runs matching this expression (as --only's), their results set aside "
        "and kept in set-aside/, e.g. after a change to the testbed that their records predate",
    )
    parser.add_argument(
        "--repeat", type=int, metavar="N", help="repeat every setting N times (overrides the blocks' repeats)"
    )
    parser.add_argument(
        "--sitting",
        type=parse_duration,
        metavar="DURATION",
        help="how long this sitting may take, e.g. 2h or 1h30m: the grid starts no run that its estimate "
        "says would end after it (the dry run's estimates), then stops; the same command resumes",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=REPO_ROOT / "results",
        help="the controller's results directory the experiment playbook writes to (default: %(default)s)",
    )
    parser.add_argument(
        "--playbook-dir",
        type=Path,
        default=REPO_ROOT / "playbooks",
        help="directory with experiment.yml and teardown.yml (default: %(default)s)",
    )


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> float:
    """Seconds of '2h', '1h30m', '45m' or '90s' (argparse type; ArgumentTypeError otherwise).

    >>> parse_duration("1h30m"), parse_duration("45m"), parse_duration("90s")
    (5400.0, 2700.0, 90.0)
    """
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 2h, 1h30m, 45m or 90s")
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    total = float(hours * 3600 + minutes * 60 + seconds)
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a sitting needs some time")
    return total


def select_runs(grid: Grid, only: str | None) -> list[Run]:
    """The grid's runs matching `only` (all when None), and its noise-floor runs whatever `only` says (unless
    the inventory cannot hold them: fit_noise_floor); raise GridError for a bad expression."""
    if not only:
        return list(grid.runs)
    chosen = {run.experiment_id for run in matching_runs(grid.runs, only, "--only")}
    return [run for run in grid.runs if run.block == NOISE_FLOOR_BLOCK or run.experiment_id in chosen]


def inventory_peers(project_dir: Path, inventory: Path | None) -> list[str]:
    """The hosts of group `peers` as ansible-inventory resolves the inventory (touches no host)."""
    command = [str(Path(sys.executable).parent / "ansible-inventory"), "--list"]
    if inventory is not None:
        command += ["-i", str(inventory)]
    try:
        result = subprocess.run(command, cwd=project_dir, capture_output=True, text=True, timeout=300)
    except OSError as error:
        raise GridError(f"cannot run ansible-inventory: {error}") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()] or ["no output"]
        raise GridError(f"--inventory: ansible-inventory failed: {lines[-1]}")
    groups = json.loads(result.stdout)

    def hosts(group: str) -> list[str]:
        entry = groups.get(group) or {}
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            found += hosts(child)
        return found

    return list(dict.fromkeys(hosts("peers")))


def fit_noise_floor(runs: list[Run], peers: list[str], only: str | None, out: TextIO) -> list[Run]:
    """`runs` without the noise floor's where ``--only`` chose a part of the grid and the inventory is too
    small for the noise floor (VMs hold one cluster shape at a time: the floor waits for a shape it fits),
    said in one line; else `runs`. A whole grid that does not fit is refused (check_inventory)."""
    floor = [run for run in runs if run.block == NOISE_FLOOR_BLOCK]
    if not only or not floor:
        return runs
    wanted = floor[0].settings.get("peers", PLAYBOOK_DEFAULT_PEERS)
    if wanted <= len(peers):
        return runs
    print(
        f"grid: the noise floor's runs need {wanted} peers and the inventory has {len(peers)}: left for a "
        f"sitting on a cluster of {wanted} or more peers",
        file=out,
    )
    return [run for run in runs if run.block != NOISE_FLOOR_BLOCK]


def check_inventory(grid: Grid, runs: list[Run], peers: list[str]) -> None:
    """Refuse runs that need more peers than the inventory has (the playbook would)."""
    for run in runs:
        wanted = run.settings.get("peers", PLAYBOOK_DEFAULT_PEERS)
        if wanted > len(peers):
            raise GridError(
                f"{grid.path}: {run.block}.peers: peers={wanted} (run {run.experiment_id}) but the inventory "
                f"has only {len(peers)} hosts in group peers"
            )


def asked_again(grid: Grid, expression: str | None) -> frozenset[str]:
    """The runs ``--again`` names (none without it); raise GridError for a bad expression."""
    if not expression:
        return frozenset()
    return frozenset(run.experiment_id for run in matching_runs(grid.runs, expression, "--again"))


def print_runs(
    grid: Grid,
    runs: list[Run],
    results_dir: Path,
    out: TextIO,
    again: frozenset[str] = frozenset(),
    revision: str | None = None,
) -> None:
    """The dry-run listing: one line per run with its time (measured where done, else estimated from the
    grid's complete runs of its shape, controller/grid/estimate.py), then totals per strategy and time."""
    print(f"grid {grid.name} ({grid.path})", file=out)
    if grid.description:
        print(f"  {grid.description}", file=out)
    width = max((len(run.experiment_id) for run in runs), default=0)
    status = GridStatus.load(results_dir / f"grid-{grid.name}.status.json", grid)
    again = to_run_again(grid, runs, results_dir, status, again, revision)
    done = {
        run.experiment_id
        for run in runs
        if experiment_complete(results_dir, run.experiment_id) and run.experiment_id not in again
    }
    estimates = estimate(runs, status.runs, done)
    for run in runs:
        settings = " ".join(f"{key}={value}" for key, value in run.settings.items())
        mark = "done" if run.experiment_id in done else "todo"
        if run.experiment_id in again:
            settings += f"  (again: {again[run.experiment_id]})"
        seconds = estimates.seconds[run.experiment_id]
        took = "    ?" if seconds is None else format_duration(seconds).rjust(5)
        if run.experiment_id in done and run.experiment_id not in estimates.measured:
            took = "    -"
        print(
            f"{run.index:4d} {mark} {run.experiment_id:<{width}} {took}  {run.block} r{run.repeat}  "
            f"{settings}",
            file=out,
        )
    complete = len(done)
    counts = {}
    for run in runs:
        counts[run.strategy] = counts.get(run.strategy, 0) + 1
    totals = ", ".join(
        f"{count} {strategy} run{'s' if count > 1 else ''}" for strategy, count in sorted(counts.items())
    )
    print(
        f"total: {len(runs)} runs ({totals or 'none'}); {complete} complete, {len(runs) - complete} to run",
        file=out,
    )
    left, unknown = estimates.total(runs)
    spent = sum(estimates.measured.values())
    unpriced = (
        f", and {unknown} of a shape not run yet (no estimate: run one repeat first)" if unknown else ""
    )
    print(
        f"time: {format_duration(spent)} spent on the complete runs; {format_duration(left)} estimated for "
        f"the runs to run{unpriced} (measured playbook time per sample of the grid's runs of the same shape)",
        file=out,
    )


def main(args: argparse.Namespace) -> int:
    try:
        grid = load_grid(args.file, repeats=args.repeat)
        runs = select_runs(grid, args.only)
        again = asked_again(grid, args.again)
        if args.inventory is not None and not args.inventory.exists():
            raise GridError(f"--inventory: no such file or directory: {args.inventory}")
        if not args.dry_run:
            for name in ("experiment.yml", "teardown.yml"):
                if not (args.playbook_dir / name).is_file():
                    raise GridError(f"--playbook-dir: {args.playbook_dir / name} does not exist")
            project_dir = args.playbook_dir.resolve().parent
            inventory = args.inventory.resolve() if args.inventory else None
            peers = inventory_peers(project_dir, inventory)
            runs = fit_noise_floor(runs, peers, args.only, sys.stdout)
            check_inventory(grid, runs, peers)
    except GridError as error:
        print(f"trainer: error: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        revision = code_revision(args.playbook_dir.resolve().parent)
        print_runs(grid, runs, args.results_dir, sys.stdout, again, revision)
        return 0
    if not runs:
        print(f"grid {grid.name}: no run matches --only {args.only!r}")
        return 0
    from controller.grid.runner import GridRunner, Playbooks

    playbooks = Playbooks(
        playbook_dir=args.playbook_dir.resolve(),
        project_dir=args.playbook_dir.resolve().parent,
        inventory=args.inventory.resolve() if args.inventory else None,
        artifacts_dir=(args.results_dir / f"grid-{grid.name}.runner").resolve(),
        on_play=lambda play: print(f"      {play}", flush=True),
    )
    return GridRunner(
        grid,
        runs,
        results_dir=args.results_dir.resolve(),
        playbooks=playbooks,
        sitting=args.sitting,
        again=again,
        revision=code_revision(playbooks.project_dir),
    ).run()
