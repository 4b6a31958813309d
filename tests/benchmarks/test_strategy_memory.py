"""benchmarks/strategy_memory.py at CI size: two ranks of DDP, ZeRO and FSDP, the table from their
summaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiment.results import read_summary

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.load_tolerant]


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
    # FSDP shards parameters, gradients and optimizer state: the shards add up to DDP's one rank (Adam's
    # step counter, 4 bytes per parameter tensor, is on every rank: "approx")
    memory = {
        strategy: [
            read_summary(tmp_path / f"{strategy}-smallcnn-r2" / f"peer-0{rank}")["memory"] for rank in (1, 2)
        ]
        for strategy in ("ddp", "fsdp")
    }
    for kind in ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes"):
        shards = [m[kind] for m in memory["fsdp"]]
        whole = memory["ddp"][0][kind]
        assert sum(shards) == pytest.approx(whole, rel=1e-3) and max(shards) < whole, (kind, shards)
