"""The chance observations test runs keep (tests/conftest.py, the ``chance`` fixture): one file per test
session under ``test-results/observations/`` (``TESTBED_OBSERVATIONS_DIR`` moves it), one JSON object a line
(the session, the time, the test, what, whether it held, the detail).

Run as a command it summarises them, so that an outcome that holds less often over time is seen::

    python tests/observations.py             # how often each held over the last 20 sessions
    python tests/observations.py --last 5    # over the last 5
    python tests/observations.py --count     # one line: the latest session's count (.ci/run prints it)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: sessions the end of a test run and the command look back over by default
HISTORY_SESSIONS = 20


@dataclass(frozen=True)
class Observation:
    test: str
    what: str
    held: bool
    detail: str
    session: str = ""
    at: str = ""


def observations_dir() -> Path:
    """Where each session's observations are kept."""
    return Path(os.environ.get("TESTBED_OBSERVATIONS_DIR") or REPO / "test-results" / "observations")


def session_file(session: str, directory: Path | None = None) -> Path:
    """The file of one session (its name made safe for a file name)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session) or "unnamed"
    return (directory or observations_dir()) / f"{safe}.jsonl"


def read(path: Path) -> list[Observation]:
    """Every observation in ``path`` (a line that is not one is skipped: a run killed mid-write)."""
    kept = []
    for line in path.read_text().splitlines():
        try:
            kept.append(Observation(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return kept


def last_sessions(directory: Path, last: int = HISTORY_SESSIONS) -> list[Path]:
    """The ``last`` session files, oldest first (sessions are named by their start time)."""
    return sorted(directory.glob("*.jsonl"))[-last:] if directory.is_dir() else []


def history_lines(files: list[Path]) -> list[str]:
    """How often each observation held over ``files``' sessions, one line each.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for session, held in (("a", True), ("b", False)):
    ...         record = {"test": "t", "what": "rounds formed", "held": held, "detail": ""}
    ...         _ = session_file(session, Path(tmp)).write_text(json.dumps(record) + "\\n")
    ...     history_lines(last_sessions(Path(tmp)))
    ['rounds formed: held 1 of 2 in 2 session(s)']
    """
    held: dict[str, list[bool]] = defaultdict(list)
    sessions: dict[str, set[str]] = defaultdict(set)
    for path in files:
        for o in read(path):
            held[o.what].append(o.held)
            sessions[o.what].add(path.stem)
    return [
        f"{what}: held {sum(values)} of {len(values)} in {len(sessions[what])} session(s)"
        for what, values in sorted(held.items())
    ]


def count_line(files: list[Path]) -> str:
    """One line on the latest session: how many were recorded, how many did not hold, and where."""
    if not files:
        return "chance observations: none recorded"
    latest = read(files[-1])
    missed = sum(not o.held for o in latest)
    shown = files[-1].relative_to(REPO) if files[-1].is_relative_to(REPO) else files[-1]
    return f"chance observations: {len(latest)} recorded, {missed} did not hold ({shown})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--last", type=int, default=HISTORY_SESSIONS, help="sessions to look back over")
    parser.add_argument("--count", action="store_true", help="one line on the latest session only")
    parser.add_argument("--dir", type=Path, default=None, help="the observations' folder")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1 (got {args.last})")
    files = last_sessions(args.dir or observations_dir(), args.last)
    if args.count:
        print(count_line(files))
        return 0
    print(f"{len(files)} session(s) in {args.dir or observations_dir()}")
    for line in history_lines(files):
        print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
