"""DiLoCo with torchft: ``trainer run --strategy diloco`` as separate processes that start at a
rendezvous on 127.0.0.1 and sync through a real torchft Lighthouse, as the replicas of one run would on the
cluster."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean

import pytest
from test_data_parallel_runs import finish, free_port, start_ranks
from trainer_testing import REPO, trainer_command, trainer_env

from experiment.results import REJOIN_FILE, REJOINS_FILE, read_rounds, read_steps, read_summary

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.load_tolerant]

SYNC_EVERY = 10


@pytest.fixture
def lighthouse(tmp_path):
    """A Lighthouse on a free port (quorum of one or more; stragglers waited for up to 10 s)."""
    command = shutil.which("torchft_lighthouse", path=str(Path(sys.executable).parent))
    assert command, "torchft is not installed next to this Python"
    port = free_port()
    log = (tmp_path / "lighthouse.log").open("w")
    process = subprocess.Popen(
        [command, "--bind", f"127.0.0.1:{port}", "--min_replicas", "1", "--join_timeout_ms", "10000"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


def _replicas(tmp_path, lighthouse, world, *extra, ranks=None, port=None):
    every = ("--sync-every", str(SYNC_EVERY), "--lighthouse", lighthouse, "--averaging-timeout", "30")
    return start_ranks(tmp_path, "diloco", world, *every, *extra, ranks=ranks, port=port)


@pytest.mark.timeout(180)
def test_two_replicas_sync_every_h_steps(tmp_path, lighthouse):
    processes = _replicas(tmp_path, lighthouse, 2, "--max-steps", "40")
    assert finish(processes, 150) == [0, 0], [p.log_path.read_text()[-2000:] for p in processes]
    summaries = [read_summary(p.results) for p in processes]
    details = [s["strategy_details"] for s in summaries]
    # the last step is a sync: both hold the same parameters, and both stopped at max steps
    assert details[0]["final_params_sha256"] == details[1]["final_params_sha256"]
    assert [s["exit_reason"] for s in summaries] == ["max_steps", "max_steps"]
    assert [d["syncs_committed"] for d in details] == [4, 4] and details[0]["smallest_quorum"] == 2
    assert details[0]["sync_every"] == SYNC_EVERY and details[0]["outer_learning_rate"] == 0.7
    for process, summary in zip(processes, summaries, strict=True):
        steps = read_steps(process.results)
        losses = [row["loss"] for row in steps]
        assert mean(losses[-10:]) < mean(losses[:10]), "the loss did not fall"
        syncing = [row["step"] for row in steps if row["averaging_seconds"] > 0]
        assert syncing == [10, 20, 30, 40]  # only every H-th step communicates
        rounds = read_rounds(process.results)
        assert [(r["kind"], r["outcome"], r["group_size"]) for r in rounds] == [("parameters", "ok", 2)] * 4
        assert sum(r["averaging_seconds"] for r in steps) == pytest.approx(
            sum(r["blocking_seconds"] for r in rounds), rel=1e-6
        )
        assert all(r["matchmaking_seconds"] > 0 for r in rounds)  # the quorum, timed apart
        memory = summary["memory"]
        # the model and DiLoCo's copy of it at the last sync; SGD's momentum and the outer Nesterov momentum
        assert memory["parameter_bytes"] == 2 * memory["gradient_bytes"] > 0
        assert memory["optimizer_state_bytes"] == memory["parameter_bytes"]


@pytest.mark.timeout(180)
def test_the_target_loss_of_one_replica_stops_both_at_the_next_sync(tmp_path, lighthouse):
    """Rank 0 reaches its (huge) target loss at its first step; both stop together at the first sync."""
    port = free_port()
    first = _replicas(
        tmp_path, lighthouse, 2, "--max-steps", "200", "--target-loss", "1000", ranks=[0], port=port
    )
    second = _replicas(tmp_path, lighthouse, 2, "--max-steps", "200", ranks=[1], port=port)
    processes = first + second
    assert finish(processes, 150) == [0, 0], [p.log_path.read_text()[-2000:] for p in processes]
    summaries = [read_summary(p.results) for p in processes]
    assert [s["exit_reason"] for s in summaries] == ["target_loss", "collective_finish"]
    assert [s["steps"] for s in summaries] == [SYNC_EVERY, SYNC_EVERY]


@pytest.mark.timeout(240)
def test_a_killed_replica_is_dropped_then_restarted_and_healed(tmp_path, lighthouse):
    """A SIGKILLed replica is dropped from the quorum and the others go on. Started again
    (as the fault agent does: rejoin.json, then the same command), it skips the rendezvous, is healed from a
    peer at its first sync, and finishes with its results appended to the killed incarnation's.

    The survivors train until that sync, however long the restart takes on a loaded machine: their step
    budget is far beyond it, and the restarted replica carries a target loss it reaches at its first step, so
    its first sync (the one that heals it) stops all three together. With the same 400 steps each, the
    survivors sometimes finished before the restarted replica's first sync, which then healed nothing."""
    processes = _replicas(tmp_path, lighthouse, 3, "--max-steps", "4000")
    *survivors, victim = processes
    deadline = time.monotonic() + 120
    while len(read_steps(victim.results)) < 5 * SYNC_EVERY:
        assert time.monotonic() < deadline and victim.poll() is None, victim.log_path.read_text()[-2000:]
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    killed_at = time.time()
    steps_before = len(read_steps(victim.results))
    # the survivors sync without it (after the Lighthouse's heartbeat timeout), then it comes back
    deadline = time.monotonic() + 120

    def synced_without_it() -> bool:
        rounds = read_rounds(survivors[0].results)
        return any(r["group_size"] == 2 for r in rounds if r["timestamp"] > killed_at)

    while not synced_without_it():
        assert time.monotonic() < deadline and survivors[0].poll() is None, survivors[0].log_path.read_text()
        time.sleep(0.2)
    (victim.results / REJOIN_FILE).write_text(json.dumps({"incarnation": 2, "killed_at": killed_at}))
    # a target loss reached at its first step: its first sync stops all three
    restart = ("--max-steps", "4000", "--target-loss", "1000")
    (restarted,) = _replicas(tmp_path, lighthouse, 3, *restart, ranks=[2])
    assert restarted.results == victim.results  # the killed incarnation's results directory
    assert finish([restarted], 200) == [0], restarted.log_path.read_text()[-3000:]
    assert finish(survivors, 60) == [0, 0], [p.log_path.read_text()[-2000:] for p in survivors]
    summaries = [read_summary(p.results) for p in survivors]
    assert [s["exit_reason"] for s in summaries] == ["collective_finish", "collective_finish"]
    details = [s["strategy_details"] for s in summaries]
    assert details[0]["final_params_sha256"] == details[1]["final_params_sha256"]
    for process in survivors:
        rounds = read_rounds(process.results)
        assert all(r["cause"] for r in rounds if r["outcome"] != "ok"), rounds
        before = [r["group_size"] for r in rounds if r["timestamp"] < killed_at and r["outcome"] == "ok"]
        after = [r["group_size"] for r in rounds if r["timestamp"] > killed_at and r["outcome"] == "ok"]
        assert before and set(before) == {3}, rounds
        # the first sync after the kill waits out the Lighthouse's heartbeat timeout (or fails), then the
        # quorum goes on without the dead replica
        assert 2 in after and set(after) <= {2, 3}, rounds
    # the restarted replica: healed from a peer (its state's bytes counted), steps numbered on, one summary
    (rejoin,) = [json.loads(line) for line in (victim.results / REJOINS_FILE).read_text().splitlines()]
    assert rejoin["incarnation"] == 2 and rejoin["steps_before"] == steps_before, rejoin
    # the checkpoint from a peer arrives within the run's averaging timeout (30 s, the collectives' bound)
    assert rejoin["state_download_bytes"] > 0 and 0 <= rejoin["state_download_seconds"] < 30, rejoin
    steps = read_steps(victim.results)
    assert [row["step"] for row in steps] == list(range(1, len(steps) + 1)), "steps numbered on"
    summary = read_summary(victim.results)
    assert summary["exit_reason"] == "target_loss" and summary["rejoin"]["incarnation"] == 2, summary
    assert summary["strategy_details"]["heals"] >= 1, summary["strategy_details"]
    # healed, then stopped with the others at the same sync: the same parameters as theirs
    assert summary["strategy_details"]["final_params_sha256"] == details[0]["final_params_sha256"]


def test_diloco_without_a_lighthouse_is_refused(tmp_path):
    command = trainer_command(
        "run", "--strategy", "diloco", "--peers", "2", "--dataset", "synthetic",
        "--results-dir", str(tmp_path / "r"),
    )  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "strategy diloco needs the Lighthouse's HOST:PORT (lighthouse=None)" in done.stderr
    rare = subprocess.run(
        [*command, "--lighthouse", "127.0.0.1:1", "--max-steps", "5", "--sync-every", "10"],
        cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert rare.returncode == 2
    assert "sync_every=10 exceeds max_steps=5: the peers would never sync (sync_every=10)" in rare.stderr
    assert not (tmp_path / "r" / "steps.csv").exists()
