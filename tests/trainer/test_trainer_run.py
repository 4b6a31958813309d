"""Real ``trainer run`` processes: a complete baseline run scraped while it trains, SIGKILL and SIGTERM
mid-run, and the refusal to overwrite a finished run."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import urllib.request

import pytest
from test_trainer_data import make_fashion_mnist
from test_trainer_telemetry import check_exposition
from trainer_testing import REPO, output_of, small_run_args, trainer_command, trainer_env, wait_for

from experiment.results import (
    ROUND_COLUMNS,
    STEP_COLUMNS,
    is_complete,
    read_config,
    read_evals,
    read_steps,
    read_summary,
)

pytestmark = pytest.mark.slow


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def steps_total(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("trainer_steps_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_baseline_run_is_complete_and_scraped_while_training(tmp_path, start_trainer) -> None:
    results = tmp_path / "baseline"
    max_steps = 120
    process = start_trainer(
        *small_run_args(
            results,
            "--max-steps",
            str(max_steps),
            "--eval-every",
            "40",
            "--eval-batches",
            "2",
            "--learning-rate",
            "0.005",
        )
    )
    config = wait_for(lambda: read_config(results), 120, "config.json", process)
    port = config["metrics_port"]
    assert isinstance(port, int) and port > 0
    # every family is served from start-up; then again while steps are being counted
    check_exposition(scrape(port), run_id="test-run", peer="peer-01", strategy="baseline")
    text = wait_for(lambda: (t := scrape(port)) and steps_total(t) >= 1 and t, 120, "a counted step", process)
    check_exposition(text, run_id="test-run", peer="peer-01", strategy="baseline")
    assert process.wait(timeout=180) == 0, output_of(process)

    assert (
        config["versions"]["torch"] and config["versions"]["torchvision"] and "hivemind" in config["versions"]
    )
    assert config["host"]["cpu_count"] == os.cpu_count() and "git_revision" in config
    assert config["batch_size"] == 16 and config["peer_id"] == "peer-01" and config["cpu"]["threads"] == 1
    # the trainer never pins itself: the placement (container, VM, benchmark) decides its cores
    assert config["cpu"]["affinity"] == sorted(os.sched_getaffinity(0))
    steps = read_steps(results)
    assert [row["step"] for row in steps] == list(range(1, max_steps + 1))
    # every column filled but a paced run's target (this run is not paced: no hold_rate)
    assert all(
        row[column] is not None for row in steps for column in STEP_COLUMNS if column != "target_seconds"
    )
    assert all(row["target_seconds"] is None and row["paced_seconds"] == 0.0 for row in steps)
    first, last = (sum(row["loss"] for row in part) / len(part) for part in (steps[:20], steps[-20:]))
    assert last < 0.85 * first, (first, last)
    assert (results / "rounds.csv").read_text().strip() == ",".join(ROUND_COLUMNS)
    assert [row["step"] for row in read_evals(results)] == [40, 80, 120]
    summary = read_summary(results)
    assert summary["exit_reason"] == "max_steps" and summary["complete"] is True and is_complete(results)
    assert summary["steps"] == max_steps and summary["samples"] == 16 * max_steps
    assert (
        summary["start_wait_seconds"] == 0.0
        and summary["barrier_release_timestamp"] >= summary["start_timestamp"]
    )
    assert summary["wall_seconds"] >= sum(row["step_seconds"] for row in steps)
    assert summary["components"]["step_seconds"]["p95"] >= summary["components"]["step_seconds"]["p50"] > 0
    assert summary["final_val_accuracy"] is not None
    # the CPU it received over the run: one busy thread for most of the run, never more than the machine
    cpu = summary["cpu_received"]
    assert cpu["declared_vcpus"] == 1 and cpu["wall_seconds"] <= summary["wall_seconds"] + 1
    assert 0.3 * cpu["wall_seconds"] < cpu["process_tree_seconds"] <= os.cpu_count() * cpu["wall_seconds"]
    assert 0 < cpu["cores_used"] <= os.cpu_count() + 0.1

    # the finished run is refused (one line, status 2) and left untouched
    again = subprocess.run(
        trainer_command("run", *small_run_args(results, "--max-steps", "5")),
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2
    assert (
        again.stderr.strip()
        .splitlines()[-1]
        .startswith("trainer: error: results dir already holds a finished run")
    )
    assert len(read_steps(results)) == max_steps


def test_sigkill_mid_run_leaves_parseable_steps(tmp_path, start_trainer) -> None:
    results = tmp_path / "killed"
    process = start_trainer(*small_run_args(results, "--max-steps", "100000"))
    wait_for(lambda: len(read_steps(results)) >= 30, 120, "30 steps on disk", process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    rows = read_steps(results)
    assert len(rows) >= 30 and [row["step"] for row in rows] == list(range(1, len(rows) + 1))
    with open(results / "steps.csv", newline="") as handle:
        complete_lines = [cells for cells in csv.reader(handle) if len(cells) == len(STEP_COLUMNS)]
    assert len(complete_lines) - 1 >= len(rows)  # the reader kept every complete row
    assert read_summary(results) is None and not is_complete(results)


def test_sigterm_writes_summary_with_signal_on_fashion_mnist(tmp_path, start_trainer) -> None:
    """Also the end-to-end fashion-mnist run: idx files generated here, read by the real command."""
    data = tmp_path / "fashion-mnist"
    data.mkdir()
    make_fashion_mnist(data, train=96, test=16)
    results = tmp_path / "stopped"
    flags = [
        "--max-steps",
        "100000",
        "--dataset",
        "fashion-mnist",
        "--data-root",
        str(data),
        "--data-workers",
        "1",
    ]
    process = start_trainer(*small_run_args(results, *flags))
    wait_for(lambda: len(read_steps(results)) >= 10, 120, "10 steps on disk", process)
    os.killpg(process.pid, signal.SIGTERM)  # like systemd: the whole group, the DataLoader worker included
    assert process.wait(timeout=60) == 0, output_of(process)
    wait_for(lambda: not group_alive(process.pid), 30, "no process left in the trainer's group")
    summary = read_summary(results)
    assert summary["exit_reason"] == "signal" and summary["complete"] is False
    assert summary["steps"] == len(read_steps(results)) >= 10
    assert read_config(results)["dataset"] == "fashion-mnist"
