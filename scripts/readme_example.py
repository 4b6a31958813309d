"""The README's example output, from a fresh run of `make demo` on this machine.

    .venv/bin/python scripts/readme_example.py --run      # time `make demo`, write its output into README
    .venv/bin/python scripts/readme_example.py --results results/<experiment_id> --seconds 260 --cluster warm

The block between the README's ``demo-output`` markers is written from the run's records (experiment.json and
each peer's summary.json, through the same filters that print the playbook's summary), with one line above it
that says where and when it ran, the time dilation D and how long the command took. The peers between the
first two and the last two are elided.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controller.summary import testbed_read_summaries, testbed_summary_table  # noqa: E402

START, END = "<!-- demo-output:start (scripts/readme_example.py writes it) -->", "<!-- demo-output:end -->"
KEEP = 2  # peers kept at each end of the table


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def newest_results(root: Path, since: float) -> Path:
    """The newest results/<id>/ whose experiment.json was written after ``since`` (Unix time)."""
    found = [p.parent for p in root.glob("*/experiment.json") if p.stat().st_mtime >= since]
    if not found:
        raise SystemExit(f"readme_example: no experiment.json under {root} written by this run")
    return max(found, key=lambda p: (p / "experiment.json").stat().st_mtime)


def summary_lines(results: Path) -> tuple[list[str], dict]:
    """The playbook's printed summary, rebuilt from the records, and experiment.json."""
    experiment = json.loads((results / "experiment.json").read_text())
    peers = sorted(p.name for p in results.iterdir() if (p / "summary.json").is_file())
    entries = testbed_read_summaries(str(results), peers)
    probes = {peer: (experiment.get("hosts", {}).get(peer) or {}).get("cpu_probe") for peer in peers}
    shown = f"results/{experiment['experiment_id']}"
    lines = testbed_summary_table(entries, experiment["experiment_id"], shown, probes)
    lines += (experiment.get("speed_fairness") or {}).get("lines") or []
    return elide(lines, len(peers)), experiment


def elide(lines: list[str], peers: int) -> list[str]:
    """The table with the peers between the first and last KEEP replaced by one ``...`` line.

    >>> rows = ["Experiment x", "header"] + [f"peer-0{i} ..." for i in range(1, 7)] + ["bound"]
    >>> elide(rows, 6)
    ['Experiment x', 'header', 'peer-01 ...', 'peer-02 ...', '...', 'peer-05 ...', 'peer-06 ...', 'bound']
    """
    rows = [i for i, line in enumerate(lines) if re.match(r"peer-\d+\s", line)]
    if peers <= 2 * KEEP + 1 or len(rows) != peers:
        return lines
    cut = rows[KEEP : peers - KEEP]
    return lines[: cut[0]] + ["..."] + lines[cut[-1] + 1 :]


def caption(experiment: dict, seconds: float, cluster: str, when: datetime.date) -> str:
    dilation = float(experiment.get("time_dilation") or 1.0)
    minutes, rest = divmod(round(seconds), 60)
    factor = f"D = {dilation:.2f}" if dilation > 1 else "undilated"
    return (
        f"A run on this machine ({when.isoformat()}, {os.cpu_count()} cores, {cpu_model()}, "
        f"{factor}): {minutes} min {rest:02d} s from "
        f"the command to the summary, the images built and the cluster {cluster}. Times and rates are the "
        "modelled machine's (measured / D)."
    )


def write_readme(readme: Path, text: str) -> None:
    """Replace the block between the markers (they must be there, once each)."""
    content = readme.read_text()
    if content.count(START) != 1 or content.count(END) != 1:
        raise SystemExit(f"readme_example: {readme} needs the markers {START!r} and {END!r} once each")
    head, rest = content.split(START)
    _, tail = rest.split(END)
    readme.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def block(lines: list[str], experiment: dict, seconds: float, cluster: str, when: datetime.date) -> str:
    return caption(experiment, seconds, cluster, when) + "\n\n```\n" + "\n".join(lines) + "\n```"


def cluster_state() -> str:
    """``warm`` where the local cluster's peer containers exist already, else ``cold``."""
    done = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}", "--filter", "name=^testbed-peer-"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return "warm" if done.returncode == 0 and done.stdout.strip() else "cold"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", action="store_true", help="run `make demo` now and time it")
    source.add_argument("--results", type=Path, help="a finished demo's results/<experiment_id>/")
    parser.add_argument("--seconds", type=float, help="with --results: how long its command took")
    parser.add_argument("--cluster", choices=("cold", "warm"), default="warm", help="with --results")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    args = parser.parse_args(argv)
    if args.results is not None and args.seconds is None:
        parser.error("--results needs --seconds (how long the run's command took)")
    if args.run:
        cluster, started = cluster_state(), time.time()
        done = subprocess.run(["make", "demo"], cwd=REPO, check=False)
        seconds = time.time() - started
        if done.returncode != 0:
            raise SystemExit(f"readme_example: make demo exited {done.returncode}; README unchanged")
        results = newest_results(REPO / "results", started)
    else:
        results, seconds, cluster = args.results, args.seconds, args.cluster
    lines, experiment = summary_lines(results)
    when = datetime.date.fromisoformat(str(experiment.get("finished") or experiment["started"])[:10])
    write_readme(args.readme, block(lines, experiment, seconds, cluster, when))
    print(f"readme_example: {args.readme} now shows {results.name} ({seconds:.0f} s, cluster {cluster})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
