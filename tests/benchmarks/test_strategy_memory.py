"""benchmarks/strategy_memory.py at CI size: two ranks of DDP, ZeRO and FSDP, the table from their
summaries, and the memory profile each rank's summary and steps record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiment.results import read_steps, read_summary

REPO = Path(__file__).resolve().parents[2]

# local_lane: `make test` runs it in the local cluster's lane, which ends earlier than the other without it
# (docs/development.md)
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.load_tolerant, pytest.mark.local_lane]


@pytest.mark.timeout(300)
def test_zero_keeps_a_shard_of_what_ddp_keeps_per_rank(tmp_path):
    command = [
        sys.executable, str(REPO / "benchmarks" / "strategy_memory.py"), "--model", "smallcnn",
        "--optimizer", "adam", "--ranks", "2", "--steps", "2", "--batch-size", "16", "--timeout", "240",
        "--strategies", "ddp,zero,fsdp", "--out", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=290)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in result.stdout.splitlines()[3:]}
    assert set(rows) == {"ddp", "zero", "fsdp"}, result.stdout
    assert float(rows["ddp"][5]) == 1.0  # DDP against itself
    assert 0.0 < float(rows["zero"][5]) < 1.0  # the largest ZeRO shard holds less than DDP's whole state
    # the shards add up to one rank's whole state (Adam's two moments of every parameter)
    assert float(rows["zero"][4]) == pytest.approx(float(rows["ddp"][4]) / 2, abs=0.2)
    assert (tmp_path / "zero-smallcnn-r2" / "peer-02" / "summary.json").exists()
    runs = {strategy: [tmp_path / f"{strategy}-smallcnn-r2" / f"peer-0{rank}" for rank in (1, 2)]
            for strategy in ("ddp", "zero", "fsdp")}  # fmt: skip
    memory = {strategy: [read_summary(run)["memory"] for run in ranks] for strategy, ranks in runs.items()}
    # ZeRO's shards of the optimizer state add up to DDP's whole state on each rank, exactly
    ddp_state = [m["optimizer_state_bytes"] for m in memory["ddp"]]
    assert ddp_state[0] == ddp_state[1] > 0
    assert sum(m["optimizer_state_bytes"] for m in memory["zero"]) == ddp_state[0]
    # DDP and ZeRO keep every parameter's gradient; every rank's resident memory is recorded, in its summary
    # and at every step (torch alone takes more than 50 MB)
    for profile in memory["ddp"] + memory["zero"]:
        assert profile["gradient_bytes"] == profile["parameter_bytes"] > 0, profile
    for profile in memory["ddp"] + memory["zero"] + memory["fsdp"]:
        assert profile["peak_rss_bytes"] >= profile["rss_bytes"] > 50 << 20, profile
    for run in runs["ddp"]:
        assert all(row["rss_bytes"] > 50 << 20 for row in read_steps(run))
    # FSDP shards parameters, gradients and optimizer state: the shards add up to DDP's one rank (Adam's
    # step counter, 4 bytes per parameter tensor, is on every rank: "approx")
    for kind in ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes"):
        shards = [m[kind] for m in memory["fsdp"]]
        whole = memory["ddp"][0][kind]
        assert sum(shards) == pytest.approx(whole, rel=1e-3) and max(shards) < whole, (kind, shards)
