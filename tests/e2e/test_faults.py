"""Faults on purpose, from the playbook, on the local cluster; peers that leave and come
back. One Hivemind run shares every such check: a kill before the start barrier (min_peers), a partition, and
churn during the run (two leaves and rejoins, drawn from a seed). (The ports closed from outside: the port
scan in test_local_cluster.py.)"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from e2e_support import extra_vars, read_json, run_playbook
from shared_cluster import BIN

from controller import faults as fault_plan

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.usefixtures("local_cluster")]

PEERS = ["peer-01", "peer-02", "peer-03", "peer-04", "peer-05"]
STARTED = PEERS[:4]  # peer-05 is killed before the start barrier; the other four start when it times out
# Long enough for five peers' trainers to start on 2 cores. Every peer's unit starts in one pass, so
# the others reach the barrier within seconds of the bootstrap peer (0.8 s for four peers in
# grids/communication.yml here); 30 s failed only when the peers were started one after another. Each second
# of it is waited out.
START_TIMEOUT = 30
# Seed 30 draws two leaves, peer-04 at 3.9 s and peer-02 at 8.6 s, each down for 4 s (the partition's peer
# and the bootstrap peer never leave; at least min_peers stay up).
CHURN = "mtbf=5s downtime=4s seed=30 until=14s"
CHURNED = ["peer-04", "peer-02"]
# small and quick (tests/e2e/test_local_cluster.py's FAST), long enough for the churn and the partition
SETTINGS = {
    "peers": 5,
    "model": "smallcnn",
    "dataset": "synthetic",
    "batch_size": 16,
    "max_steps": 160,
    "target_batch_size": 512,
    "matchmaking_time": 2,
    "averaging_timeout": 15,
    "finish_grace": 10,
    "start_timeout": START_TIMEOUT,
    "min_peers": 2,
    "progress_interval": 10,
    "run_timeout": 900,
    "monitoring": False,
    "measure_bandwidth": False,
    "cpu_probe_seconds": 0,
    "experiment_id": "e2e-faults",
    # the pause is due long after the training ends: reported as not applied
    "faults": "kill:peer-05@start,partition:peer-03@10s+8s,pause:peer-03@600s+5s",
    "churn": CHURN,
}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _ok_after(rows: list[dict[str, str]], moment: float) -> list[dict[str, str]]:
    return [r for r in rows if r["outcome"] == "ok" and float(r["timestamp"]) > moment]


def test_kill_before_the_barrier_then_churn_and_a_partition_during_the_run(tmp_path, chance):
    run = run_playbook("experiment.yml", *extra_vars(results_root=str(tmp_path), **SETTINGS))
    assert run.returncode == 0, run.output[-8000:]
    results = tmp_path / "e2e-faults"
    experiment = read_json(results / "experiment.json")

    # the peer killed on purpose does not make the experiment incomplete; the others completed, the two that
    # left and came back too
    assert experiment["complete"] is True, experiment["incomplete_reason"]
    assert {host["cpu_probe"] for host in experiment["hosts"].values()} == {None}  # cpu_probe_seconds=0
    expected = experiment["expected_incomplete"]
    assert {p.split(": ")[0] for p in expected} == {"peer-05"}, expected
    # by default the first peer starts the DHT (and trains); the others join it (a DHT-only node on the
    # monitor host: tests/e2e/test_local_cluster.py)
    assert experiment["bootstrap"] == {"by": "peer", "host": "peer-01", "dht_node": None}
    assert (results / "peer-01" / "multiaddrs.txt").exists()

    # kill@start with min_peers: the others waited the barrier out, then started as four
    faults = experiment["faults"]
    (at_start,) = [f for f in faults if f["host"] == "peer-05"]
    (partition,) = [f for f in faults if f["kind"] == "partition"]
    (late,) = [f for f in faults if f["kind"] == "pause"]
    # due after the run ended: skipped, by the agent that saw the trainer end or was stopped at the run's end
    assert late["status"] == "skipped", late
    not_applied = f"fault {late['spec']} was not applied ("
    assert any(w.startswith(not_applied) for w in experiment["warnings"]), experiment["warnings"]
    assert f"WARNING: {not_applied}" in run.output
    restarts = [f for f in faults if f["kind"] == "restart"]
    assert at_start["kind"] == "kill" and at_start["status"] == "applied", at_start
    assert at_start["applied_seconds"] is None, at_start  # before the barrier: no time from its release
    assert not (results / "peer-05" / "summary.json").exists()
    for peer in STARTED:
        summary = read_json(results / peer / "summary.json")
        assert summary["complete"] is True, (peer, summary)
        assert summary["strategy_details"]["started_with_peers"] == len(STARTED), summary["strategy_details"]
    # the bootstrap peer, first to start, waited the barrier out; the others started with it, not each at its
    # own timeout (they started later, so they waited less)
    assert read_json(results / "peer-01" / "summary.json")["start_wait_seconds"] >= START_TIMEOUT - 5
    released = [read_json(results / peer / "started.json")["barrier_released_at"] for peer in STARTED]
    assert max(released) - min(released) < 5, released

    # the churn: drawn from the recorded seed (the same seed gives the same schedule), two leaves and rejoins
    churn = experiment["churn"]
    assert (churn["seed"], churn["leaves"], churn["min_peers"]) == (30, 2, 2), churn
    again = fault_plan.testbed_faults(
        SETTINGS["faults"], PEERS, "hivemind", SETTINGS["run_timeout"], churn=CHURN, min_peers=2
    )
    assert [f["spec"] for f in again["faults"]] == [f["spec"] for f in faults], faults
    assert [f["host"] for f in restarts] == CHURNED, restarts
    # every fault at its time, the downtime and the partition as long as planned
    for fault in (partition, *restarts):
        assert fault["status"] == "healed", fault
        assert abs(fault["applied_seconds"] - fault["at_seconds"]) < 2, fault
        duration = fault["healed_seconds"] - fault["applied_seconds"]
        assert abs(duration - fault["duration_seconds"]) < 2, fault

    # each restarted trainer came back as a second incarnation: it downloaded the collaboration's state,
    # went on with the step numbers where the killed one stopped, and appended to the same results
    for restart in restarts:
        peer_dir = results / restart["host"]
        (rejoin,) = _jsonl(peer_dir / "rejoins.jsonl")
        assert rejoin["incarnation"] == 2 and rejoin["restarted_at"] >= restart["applied_at"], rejoin
        assert rejoin["state_download_seconds"] > 0 and rejoin["epoch_after"] >= rejoin["epoch_before"], (
            rejoin
        )
        steps = _rows(peer_dir / "steps.csv")
        before = [s for s in steps if float(s["timestamp"]) <= restart["applied_at"] + 1]
        after = [s for s in steps if float(s["timestamp"]) >= restart["healed_at"]]
        assert before and after, restart
        assert int(after[0]["step"]) == rejoin["steps_before"] + 1 == int(before[-1]["step"]) + 1
        # one clock for both incarnations: the run's first barrier release
        assert float(after[0]["wall_seconds"]) > restart["healed_seconds"] - 1, after[0]
        assert (peer_dir / "trainer.1.log").is_file() and (peer_dir / "trainer.log").is_file()
        assert read_json(peer_dir / "summary.json")["rejoin"]["incarnation"] == 2
        chance.expect(
            rejoin["epoch_after"] > 0, f"{restart['host']} downloaded a later epoch's state", rejoin
        )

    # every failed round of every peer that started has its cause
    for peer in STARTED:
        rounds = _rows(results / peer / "rounds.csv")
        assert all(r["cause"] for r in rounds if r["outcome"] != "ok"), (peer, rounds)

    # the report gives each fault's cost, the rejoins' times, and says whether the partitioned peer came back
    report = subprocess.run(
        [str(BIN / "trainer"), "report", str(tmp_path), "--out", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    costs = {row["fault"]: row for row in _rows(tmp_path / "report" / "faults.csv")}
    for restart in restarts:
        row = costs[restart["spec"]]
        assert float(row["first_step_after_seconds"]) > 0, row
        assert float(row["state_download_seconds"]) > 0 and int(row["state_download_bytes"]) > 0, row
        came_back = bool(_ok_after(_rows(results / restart["host"] / "rounds.csv"), restart["healed_at"]))
        assert row["rejoined"] == str(came_back), row
        chance.expect(came_back, f"{restart['host']} averaged again after its restart", row)
    partitioned = costs["partition:peer-03@10s+8s"]
    came_back = bool(_ok_after(_rows(results / "peer-03" / "rounds.csv"), partition["healed_at"]))
    assert partitioned["rejoined"] == str(came_back), partitioned

    # the others went on without it: its rounds during the partition failed, or it came back behind and lost
    # the round (and the samples) to the state download. Whether a round fell into the 8 s is chance; where
    # a round of any peer began and ended while peer-03 was cut off, peer-03 was not in it: that round failed
    # (counted) or went on without it (peer-03 then fails its own or comes back behind): the cost is due.
    def began(row: dict[str, str]) -> float:
        phases = (float(row[name] or 0) for name in ("matchmaking_seconds", "allreduce_seconds"))
        return float(row["timestamp"]) - sum(phases)

    every = [r for peer in STARTED for r in _rows(results / peer / "rounds.csv")]
    during = [
        r
        for r in every
        if partition["applied_at"] + 1 < began(r) and float(r["timestamp"]) < partition["healed_at"] - 1
    ]
    if during:
        assert int(partitioned["rounds_failed"]) >= 1 or int(partitioned["samples_lost"]) > 0, (
            partitioned,
            during,
        )
    chance.expect(bool(during), "a round began and ended while peer-03 was cut off", len(during))
    chance.expect(
        int(partitioned["rounds_failed"]) >= 1 and int(partitioned["samples_lost"]) > 0,
        "the partition cost rounds and samples",
        partitioned,
    )
    assert (tmp_path / "report" / "faults_e2e-faults.png").is_file()
    text = (tmp_path / "report" / "report.md").read_text()
    assert "partition:peer-03@10s+8s" in text and restarts[0]["spec"] in text
    print(f"partitioned peer rejoined: {came_back}; costs: {costs}")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# The same churn during a DiLoCo run. Three replicas sync every 50 steps through torchft's
# Lighthouse on the monitor host. The same churn settings and seed draw the same leave times and downtimes
# (3.9 s and 8.6 s, 4 s each), here of peer-02 and peer-03 (DiLoCo has no bootstrap peer to spare). 2000
# steps last about 30 s here: the restarted replicas come back while the others still train.
DILOCO = {
    "model": "smallcnn",
    "dataset": "synthetic",
    "batch_size": 16,
    "progress_interval": 10,
    "run_timeout": 900,
    "monitoring": False,
    "measure_bandwidth": False,
    "cpu_probe_seconds": 0,
    "strategy": "diloco",
    "peers": 3,
    "max_steps": 2000,
    "sync_every": 50,
    "averaging_timeout": 15,
    "start_timeout": 60,  # every replica arrives: not waited out
    "experiment_id": "e2e-diloco-churn",
    "churn": CHURN,
}


# extended: the churn's path is the test above's, a DiLoCo replica's restart and heal test_diloco_runs.py's
@pytest.mark.extended
def test_a_diloco_run_survives_the_same_churn(tmp_path, chance):
    run = run_playbook("experiment.yml", *extra_vars(results_root=str(tmp_path), **DILOCO))
    assert run.returncode == 0, run.output[-8000:]
    results = tmp_path / "e2e-diloco-churn"
    experiment = read_json(results / "experiment.json")
    assert experiment["complete"] is True, experiment["incomplete_reason"]
    assert experiment["expected_incomplete"] == []
    restarts = experiment["faults"]
    assert [(f["kind"], f["host"], f["status"]) for f in restarts] == [
        ("restart", "peer-02", "healed"),
        ("restart", "peer-03", "healed"),
    ], restarts
    assert [f["at_seconds"] for f in restarts] == [3.873, 8.594]  # the Hivemind run's leave times
    assert experiment["churn"]["seed"] == 30 and experiment["churn"]["leaves"] == 2
    # the Lighthouse ran on the monitor host, bound to its cluster address, and its log came back
    assert experiment["lighthouse"]["host"] == "monitor", experiment["lighthouse"]
    lighthouse = (results / experiment["lighthouse"]["log"]).read_text()
    assert "Lighthouse listening on" in lighthouse and "Received quorum request" in lighthouse

    hosts = ("peer-01", "peer-02", "peer-03")
    summaries = {peer: read_json(results / peer / "summary.json") for peer in hosts}
    assert {s["exit_reason"] for s in summaries.values()} == {"max_steps"}, summaries
    details = summaries["peer-01"]["strategy_details"]
    network_prefix = experiment["hosts"]["peer-01"]["address"].rsplit(".", 1)[0]
    assert details["lighthouse"] == f"{network_prefix}.10:29510"  # the monitor host's cluster address
    assert experiment["lighthouse"]["endpoint"] == details["lighthouse"]
    assert details["sync_every"] == 50  # the run's settings reached the replicas through the role
    rounds = _rows(results / "peer-01" / "rounds.csv")
    assert {r["kind"] for r in rounds} == {"parameters"}
    assert all(r["cause"] for r in rounds if r["outcome"] != "ok"), rounds
    sizes = [int(r["group_size"]) for r in rounds if r["outcome"] == "ok"]
    assert sizes[0] == 3 and set(sizes) <= {1, 2, 3}, sizes
    # a sync while a replica was down: torchft failed it, or formed a quorum without it (which, depends on
    # where in the sync the kill fell and on the Lighthouse's heartbeat and join timeouts)
    after = [r for r in rounds if float(r["timestamp"]) > restarts[0]["applied_at"]]
    touched = [r for r in after if r["outcome"] != "ok" or r["group_size"] == "2"]
    outcomes = [(r["outcome"], r["group_size"]) for r in after[:5]]
    chance.expect(touched, "the churn cost peer-01 a sync or a smaller quorum", outcomes)
    # the pseudo-gradients of one sync per 50 steps: far fewer bytes per sample than a gradient per step
    assert 0 < summaries["peer-01"]["network"]["sent_bytes_per_sample"] < 10_000
    # each restarted replica was healed from a peer (torchft's checkpoint) and finished its steps
    for restart in restarts:
        peer_dir = results / restart["host"]
        (rejoin,) = _jsonl(peer_dir / "rejoins.jsonl")
        assert rejoin["incarnation"] == 2 and rejoin["state_download_bytes"] > 0, rejoin
        assert summaries[restart["host"]]["strategy_details"]["heals"] >= 1

    report = subprocess.run(
        [str(BIN / "trainer"), "report", str(tmp_path), "--out", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    costs = {row["fault"]: row for row in _rows(tmp_path / "report" / "faults.csv")}
    for restart in restarts:
        row = costs[restart["spec"]]
        assert float(row["first_step_after_seconds"]) > 0 and int(row["state_download_bytes"]) > 0, row
        # counted (a whole number each, none missing), however many the restart cost
        assert row["samples_lost"].isdigit() and row["rounds_failed"].isdigit(), row
    strategies = {row["strategy"]: row for row in _rows(tmp_path / "report" / "strategies.csv")}
    assert "diloco" in strategies, strategies
