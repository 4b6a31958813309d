"""Run a grid's experiments one after another through the experiment playbook (ansible-runner).

Runs whose results are complete are skipped, so an interrupted or partly failed grid resumes where it stopped.
A failed run is recorded and the grid goes on with the next one (after tearing the failed run's cluster down).
Ctrl-C (SIGINT) or SIGTERM cancels the running playbook, tears the experiment down with `teardown.yml` and
stops; a second Ctrl-C during the teardown gives up waiting for it. A sitting (``--sitting``) ends the grid
before the first run that its estimate (controller/grid/estimate.py) says would end after the sitting's time.
A complete run whose received compute strays further from its calibration than the grid's ``compute_limit``
is moved to ``<results>/set-aside/<id>-<attempt>`` and run again, at most ``compute_reruns`` times; the last
attempt is then kept and the status file says so. The limit holds for every run the grid holds: a complete run
outside it when the grid starts (a limit made tighter) is set aside and run again the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from controller.grid.estimate import estimate
from controller.grid.spec import Grid, Run
from controller.grid.status import GridStatus, experiment_complete
from experiment.record import read_experiment

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
#: below the results directory: complete runs set aside because their compute strayed from the calibration
SET_ASIDE_DIR = "set-aside"


def compute_outside(results_dir: Path, experiment_id: str, limit: float | None) -> str:
    """Why a complete run's received compute is outside ``limit`` (controller/received_compute.py), or ''
    where it is within, or the run followed no calibration, or the grid checks none."""
    received = (read_experiment(results_dir / experiment_id) or {}).get("received_compute")
    if limit is None or not isinstance(received, dict) or not received.get("peers"):
        return ""
    ratios = {host: float(peer["ratio"]) for host, peer in received["peers"].items()}
    outside = {host: ratio for host, ratio in ratios.items() if abs(ratio - 1) > limit}
    if not outside:
        return ""
    listed = ", ".join(f"{host} {ratio:.3f}" for host, ratio in sorted(outside.items()))
    return f"received compute outside the calibration's ±{limit * 100:g}% ({received.get('basis')}: {listed})"


#: why a run asked for by ``--again`` is run again
ASKED_AGAIN = "asked to run again (--again)"


def code_revision(project_dir: Path) -> str | None:
    """The commit checked out in ``project_dir`` (None outside a git checkout)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(project_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def to_run_again(
    grid: Grid,
    runs: list[Run],
    results_dir: Path,
    status: GridStatus,
    asked: frozenset[str] = frozenset(),
    revision: str | None = None,
) -> dict[str, str]:
    """The complete runs to set aside and run again, each with why: those ``asked`` for (``--again``), and
    those outside the grid's ``compute_limit`` that have reruns left (``compute_reruns``): the limit applies
    to every run the grid holds, those committed before it was set too.

    ``--again`` runs a run again once for each ``revision`` of the code (the checkout's commit,
    :func:`code_revision`): the same command resumes without running again what it ran again, and after a
    commit that changes what a run measures the same ``--again`` runs them with the new code."""
    again = {}
    for run in runs:
        if experiment_complete(results_dir, run.experiment_id):
            record = status.runs[run.experiment_id]
            redone = any(
                entry.get("why") == ASKED_AGAIN
                and entry.get("revision") == revision
                and (record.finished or 0) > entry.get("at", 0)
                for entry in record.set_aside
            )
            if run.experiment_id in asked and not redone:
                again[run.experiment_id] = ASKED_AGAIN
                continue
            outside = compute_outside(results_dir, run.experiment_id, grid.compute_limit)
            if outside and len(record.set_aside) < grid.compute_reruns:
                again[run.experiment_id] = outside
    return again


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class PlaybookResult:
    status: str  # ansible-runner's: successful, failed, canceled, timeout
    rc: int | None
    log: Path | None
    error: str | None = None


@dataclass(frozen=True)
class Playbooks:
    """Runs `experiment.yml` and `teardown.yml` from `playbook_dir` with ansible-runner.

    :param playbook_dir: directory holding experiment.yml and teardown.yml (the repository's playbooks/)
    :param project_dir: working directory of ansible-playbook (where ansible.cfg is found)
    :param inventory: inventory passed with -i; None uses ansible.cfg's default (the local cluster)
    :param artifacts_dir: ansible-runner's private data dir; each playbook run's output lands in
        ``artifacts/<ident>/stdout`` below it
    """

    playbook_dir: Path
    project_dir: Path
    inventory: Path | None
    artifacts_dir: Path
    on_play: Callable[[str], None] | None = None

    def run(
        self, name: str, extravars: dict[str, Any], ident: str, cancel: Callable[[], bool]
    ) -> PlaybookResult:
        import ansible_runner

        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        # ansible-playbook must come from the same environment as this process (the venv), activated or not
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        cancel_callback = _GracefulCancel(cancel)
        try:
            runner = ansible_runner.run(
                private_data_dir=str(self.artifacts_dir),
                project_dir=str(self.project_dir),
                playbook=str(self.playbook_dir / name),
                inventory=str(self.inventory) if self.inventory else None,
                extravars=extravars,
                ident=ident,
                envvars={"PATH": path, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
                quiet=True,
                cancel_callback=cancel_callback,
                event_handler=self._event,
                suppress_env_files=True,
                settings={"pexpect_timeout": 1},
            )
        except Exception as error:  # ansible-runner's own failures: record them as a failed run
            logger.debug("ansible-runner failed", exc_info=True)
            return PlaybookResult(status="error", rc=None, log=None, error=f"ansible-runner: {error}")
        finally:
            cancel_callback.stop_leftovers()
        log = self.artifacts_dir / "artifacts" / ident / "stdout"
        return PlaybookResult(status=runner.status, rc=runner.rc, log=log if log.exists() else None)

    def _event(self, event: dict[str, Any]) -> bool:
        """Report each play as it starts (progress within a long experiment); keep every event."""
        if self.on_play is not None and event.get("event") == "playbook_on_play_start":
            self.on_play(str((event.get("event_data") or {}).get("play", "")))
        return True


class _GracefulCancel:
    """ansible-runner's cancel callback: interrupt ansible-playbook first, kill it only if it does not stop.

    ansible-runner cancels by SIGKILL to the playbook's process group, but ansible's workers run in their own
    sessions and survive that. SIGINT to ansible-playbook is forwarded to its workers, so it goes first; after
    `grace` seconds the callback returns True and ansible-runner kills what is left. A task's own processes
    (a module's command) can outlive both: the processes below ansible-playbook when it was interrupted get a
    SIGTERM once the playbook has returned (``stop_leftovers``).
    """

    def __init__(self, requested: Callable[[], bool], grace: float = 30.0) -> None:
        self.requested = requested
        self.grace = grace
        self.interrupted_at: float | None = None
        self._below_playbook: dict[int, str] = {}  # pid -> start time, when interrupted

    def __call__(self) -> bool:
        if not self.requested():
            return False
        if self.interrupted_at is None:
            self.interrupted_at = time.monotonic()
            parents = _parent_pids()
            children = [pid for pid, parent in parents.items() if parent == os.getpid()]
            self._below_playbook = {
                pid: started
                for pid in _descendants(children, parents)
                if (started := _start_time(pid)) is not None
            }
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
            return False
        return time.monotonic() - self.interrupted_at > self.grace

    def stop_leftovers(self) -> None:
        """SIGTERM to each process that was below the interrupted playbook and still runs (same start)."""
        for pid, started in self._below_playbook.items():
            if _start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)


def _parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _descendants(roots: list[int], parents: dict[int, int]) -> list[int]:
    """`roots` and every process below them."""
    found, frontier = list(roots), list(roots)
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot): tells a live process from a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class _StopRequest:
    """Turns SIGINT/SIGTERM into a flag the playbook's cancel callback reads (not KeyboardInterrupt)."""

    def __init__(self, out: TextIO) -> None:
        self.event = threading.Event()
        self.signals = 0
        self.out = out
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame: object) -> None:
        self.signals += 1
        self.event.set()
        if self.signals == 1:
            print("\ngrid: stopping: cancelling the running experiment, then tearing it down", file=self.out)
        else:
            print("grid: second interrupt: not waiting for the teardown", file=self.out)

    def is_set(self) -> bool:
        return self.event.is_set()

    def forced(self) -> bool:
        return self.signals > 1


def format_duration(seconds: float) -> str:
    """'1h02m', '3m05s' or '12s'."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def failure_message(log: Path | None, limit: int = 300) -> str:
    """The telling line of a failed playbook's output: the last 'fatal'/'ERROR!' line, else the last line."""
    if log is None:
        return "no playbook output"
    try:
        text = _ANSI_ESCAPE.sub("", log.read_text(errors="replace"))
        lines = [line.strip() for line in text.splitlines() if line.strip()]
    except OSError:
        return "no playbook output"
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(("fatal:", "ERROR!", "failed:")):
            # the yaml/default callbacks put the message on the lines after the fatal line
            detail = " ".join(lines[index : index + 4])
            return detail[:limit]
    return lines[-1][:limit] if lines else "no playbook output"


class GridRunner:
    """Runs the given runs of a grid (see module docstring).

    :param results_dir: the controller's results directory (`results/`): resume reads
        `<results_dir>/<experiment_id>/experiment.json`; the status file is
        `<results_dir>/grid-<name>.status.json`
    """

    def __init__(
        self,
        grid: Grid,
        runs: list[Run],
        *,
        results_dir: Path,
        playbooks: Playbooks,
        out: TextIO = sys.stdout,
        clock: Callable[[], float] = time.monotonic,
        sitting: float | None = None,
        again: frozenset[str] = frozenset(),
        revision: str | None = None,
    ) -> None:
        """:param sitting: seconds this sitting may take: no run starts that its estimate says would end
        after them (a run of a shape not yet priced starts while any time is left); None: no limit
        :param again: complete runs to set aside and run again (``--again``)
        :param revision: the commit of the code the runs run (:func:`code_revision`; what ``--again`` is once
            for)"""
        self.grid = grid
        self.sitting = sitting
        self.again = again
        self.revision = revision
        self.runs = runs
        self.results_dir = results_dir
        self.playbooks = playbooks
        self.out = out
        self.clock = clock
        self.status = GridStatus.load(results_dir / f"grid-{grid.name}.status.json", grid)

    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def run(self) -> int:
        again = to_run_again(self.grid, self.runs, self.results_dir, self.status, self.again, self.revision)
        for run in self.runs:
            why = again.get(run.experiment_id)
            if why:
                record = self.status.runs[run.experiment_id]
                kept = self._set_aside(run, len(record.set_aside) + 1)
                entry = {"path": str(kept), "why": why, "finished": record.finished, "at": time.time()}
                record.set_aside.append({**entry, "revision": self.revision} if why == ASKED_AGAIN else entry)
                self.status.update(run, status="pending", message=f"{why}: set aside in {kept}, to run again")
                self.say(f"grid: {run.experiment_id}: {why}: set aside in {kept}, to run again")
        done = [run for run in self.runs if experiment_complete(self.results_dir, run.experiment_id)]
        for run in done:
            if self.status.runs[run.experiment_id].status != "complete":
                self.status.update(run, status="skipped", message="complete results found")
        todo = [run for run in self.runs if run not in done]
        self.status.save()
        self.say(
            f"grid {self.grid.name}: {len(self.runs)} runs selected, {len(done)} already complete, "
            f"{len(todo)} to run; status in {self.status.path}"
        )
        started = self.clock()
        durations: list[float] = []
        failed: list[Run] = []
        with _StopRequest(self.out) as stop:
            for number, run in enumerate(todo, 1):
                if stop.is_set():
                    break
                over = self._past_sitting(run, self.clock() - started)
                if over:
                    left = len(todo) - number + 1
                    runs_left = f"{left} run{'s' if left > 1 else ''} left"
                    self.say(f"grid: {over}; {runs_left} (run the same command to resume)")
                    break
                self.say(
                    f"[{number}/{len(todo)}] {run.experiment_id} ({run.block}, repeat {run.repeat}): starting"
                )
                outcome = self._run_one(run, stop)
                while outcome == "rerun":
                    why = self.status.runs[run.experiment_id].message
                    self.say(f"[{number}/{len(todo)}] {run.experiment_id}: {why}")
                    outcome = self._run_one(run, stop)
                if outcome == "interrupted":
                    self._teardown(run, stop)
                    break
                durations.append(self.status.runs[run.experiment_id].seconds or 0.0)
                if outcome == "failed":
                    failed.append(run)
                    self._teardown(run, stop)
                elapsed = self.clock() - started
                left = len(todo) - number
                eta = format_duration(sum(durations) / len(durations) * left) if left else "0s"
                record = self.status.runs[run.experiment_id]
                detail = f": {record.message}" if outcome == "failed" else ""
                took = format_duration(record.seconds or 0)
                self.say(
                    f"[{number}/{len(todo)}] {run.experiment_id}: {outcome} in {took}{detail}"
                    f" | elapsed {format_duration(elapsed)}, ETA {eta} ({left} left)"
                )
            interrupted = stop.is_set()
        return self._summary(failed, interrupted)

    def _past_sitting(self, run: Run, elapsed: float) -> str:
        """Why ``run`` must wait for the next sitting, or '' when it may start."""
        if self.sitting is None:
            return ""
        left = self.sitting - elapsed
        if left <= 0:
            return f"the sitting's {format_duration(self.sitting)} are over"
        complete = {
            r.experiment_id for r in self.runs if experiment_complete(self.results_dir, r.experiment_id)
        }
        expected = estimate(self.runs, self.status.runs, complete).seconds.get(run.experiment_id)
        if expected is not None and expected > left:
            return (
                f"the sitting ends in {format_duration(left)}, before {run.experiment_id} would "
                f"(estimated {format_duration(expected)})"
            )
        return ""

    def _run_one(self, run: Run, stop: _StopRequest) -> str:
        record = self.status.runs[run.experiment_id]
        extravars = {**run.extravars(), "results_root": str(self.results_dir)}
        if (self.results_dir / run.experiment_id).exists() or record.set_aside:
            # partial results of an earlier attempt, or a run set aside: the experiment is redone as a whole
            # (the hosts keep the set-aside run's results, which they would otherwise hand back again)
            extravars["force"] = True
        ident = f"{run.experiment_id}-{time.strftime('%Y%m%dT%H%M%S')}-{record.attempts + 1}"
        began, wall = self.clock(), time.time()
        self.status.update(run, status="running", attempts=record.attempts + 1, started=wall, finished=None)
        result = self.playbooks.run("experiment.yml", extravars, ident, stop.is_set)
        seconds = self.clock() - began
        changes: dict[str, Any] = {
            "finished": time.time(),
            "seconds": seconds,
            "runner_status": result.status,
            "rc": result.rc,
            "log": str(result.log) if result.log else None,
        }
        if result.status == "canceled" or stop.is_set():
            self.status.update(run, status="interrupted", message="stopped by the user", **changes)
            return "interrupted"
        if result.status == "successful" and experiment_complete(self.results_dir, run.experiment_id):
            outside = self._compute_outside(run)
            if outside and len(record.set_aside) < self.grid.compute_reruns:
                kept = self._set_aside(run, len(record.set_aside) + 1)
                record.set_aside.append({"path": str(kept), "why": outside, "finished": changes["finished"]})
                message = f"{outside}: set aside in {kept}, running it again"
                self.status.update(run, status="pending", message=message, **changes)
                return "rerun"
            reruns = len(record.set_aside)
            kept_anyway = f"kept with {outside} after {reruns} reruns (compute_reruns)" if outside else ""
            self.status.update(run, status="complete", message=kept_anyway, **changes)
            return "complete"
        if result.status == "successful":
            experiment = read_experiment(self.results_dir / run.experiment_id) or {}
            reason = experiment.get("incomplete_reason") or "experiment.json missing or not complete"
            message = f"playbook succeeded but results are incomplete: {reason}"
        else:
            # the run's own record of its failure (plugins/callback/testbed_run_failure.py), else the log's
            experiment = read_experiment(self.results_dir / run.experiment_id) or {}
            recorded = experiment.get("incomplete_reason") if experiment.get("failed") else None
            detail = result.error or recorded or failure_message(result.log)
            message = f"playbook {result.status} (rc {result.rc}): {detail}"
        self.status.update(run, status="failed", message=message, **changes)
        return "failed"

    def _compute_outside(self, run: Run) -> str:
        return compute_outside(self.results_dir, run.experiment_id, self.grid.compute_limit)

    def _set_aside(self, run: Run, attempt: int) -> Path:
        """Move a complete run's results out of the grid's way, kept (SET_ASIDE_DIR), to run it again."""
        target = self.results_dir / SET_ASIDE_DIR / f"{run.experiment_id}-{attempt}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(self.results_dir / run.experiment_id), target)
        return target

    def _teardown(self, run: Run, stop: _StopRequest) -> None:
        self.say(f"grid: tearing down {run.experiment_id} (playbooks/teardown.yml)")
        ident = f"teardown-{run.experiment_id}-{time.strftime('%Y%m%dT%H%M%S')}"
        extravars = {"experiment_id": run.experiment_id, "results_root": str(self.results_dir)}
        result = self.playbooks.run("teardown.yml", extravars, ident, stop.forced)
        if result.status != "successful":
            self.say(f"grid: teardown {result.status}: {failure_message(result.log)} (log: {result.log})")

    def _summary(self, failed: list[Run], interrupted: bool) -> int:
        complete = sum(experiment_complete(self.results_dir, run.experiment_id) for run in self.runs)
        self.say(
            f"grid {self.grid.name}: {complete}/{len(self.runs)} runs complete, {len(failed)} failed"
            + (", interrupted (run the same command again to resume)" if interrupted else "")
        )
        for run in failed:
            record = self.status.runs[run.experiment_id]
            self.say(f"  failed: {run.experiment_id}: {record.message} (log: {record.log})")
        if interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if failed else EXIT_OK
