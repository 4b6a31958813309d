"""Synchronous data parallelism: ``trainer run --strategy ddp|zero`` as separate processes that
rendezvous over TCP on 127.0.0.1 (gloo), as the ranks of one run would on the cluster."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from statistics import mean

import pytest
from trainer_testing import REPO, trainer_command, trainer_env

from experiment.results import read_evals, read_rounds, read_steps, read_summary

# local_lane: `make test` runs them in the local cluster's lane, so that the two lanes end together
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.load_tolerant, pytest.mark.local_lane]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ranks(
    tmp_path: Path, strategy: str, world: int, *extra: str, ranks=None, port=None
) -> list[subprocess.Popen]:
    """The ranks (default all of them) of one run; ``port``: the rendezvous's (default a free one)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    processes = []
    for rank in ranks if ranks is not None else range(world):
        results = tmp_path / f"peer-{rank + 1:02d}"
        command = trainer_command(
            "run", "--strategy", strategy, "--model", "smallcnn", "--dataset", "synthetic",
            "--batch-size", "16", "--learning-rate", "0.05", "--vcpus", "1", "--metrics-port", "-1",
            "--peers", str(world), "--rank", str(rank), "--rendezvous", f"127.0.0.1:{port}",
            "--peer-id", f"peer-{rank + 1:02d}", "--results-dir", str(results), *extra,
        )  # fmt: skip
        log = (tmp_path / f"rank-{rank}.log").open("w")
        process = subprocess.Popen(command, cwd=REPO, env=trainer_env(), stdout=log, stderr=subprocess.STDOUT)
        process.results = results  # type: ignore[attr-defined]
        process.log_path = tmp_path / f"rank-{rank}.log"  # type: ignore[attr-defined]
        processes.append(process)
    return processes


def finish(processes: list[subprocess.Popen], timeout: float) -> list[int]:
    codes = []
    for process in processes:
        try:
            codes.append(process.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            pytest.fail(f"a rank did not finish in {timeout} s:\n{process.log_path.read_text()[-3000:]}")
    return codes


@pytest.mark.parametrize(
    "strategy, extra",
    [("ddp", ()), ("zero", ()), ("fsdp", ()), *(("deepspeed", ("--zero-stage", str(s))) for s in (1, 2, 3))],
)
@pytest.mark.timeout(180)
def test_two_ranks_train_the_same_model(tmp_path, strategy, extra):
    processes = start_ranks(tmp_path, strategy, 2, "--max-steps", "40", "--averaging-timeout", "30", *extra)
    codes = finish(processes, 150)
    assert codes == [0, 0], [p.log_path.read_text()[-2000:] for p in processes]
    summaries = [read_summary(p.results) for p in processes]
    details = [s["strategy_details"] for s in summaries]
    # identical parameters on both ranks after the run, and both stopped at max steps together
    assert details[0]["final_params_sha256"] == details[1]["final_params_sha256"]
    assert [s["steps"] for s in summaries] == [40, 40]
    assert [s["exit_reason"] for s in summaries] == ["max_steps", "max_steps"]
    for process in processes:
        steps = read_steps(process.results)
        losses = [row["loss"] for row in steps]
        assert mean(losses[-10:]) < mean(losses[:10]), "the loss did not fall"
        assert all(row["averaging_seconds"] > 0 for row in steps)  # every step all-reduced
        assert all(row["peers"] == 2 for row in steps)
        rounds = read_rounds(process.results)
        kinds = {"gradients"} | ({"parameters"} if strategy != "ddp" else set())
        assert {row["kind"] for row in rounds} == kinds
        assert len(rounds) == 40 * len(kinds) and all(row["outcome"] == "ok" for row in rounds)
        # the breakdown's averaging time is the all-reduce (and broadcast) the rounds record, and the
        # gradients' packing into one buffer and back around it
        averaging = sum(r["averaging_seconds"] for r in steps)
        allreduce = sum(r["allreduce_seconds"] for r in rounds)
        assert 0 < allreduce <= averaging * (1 + 1e-6), (averaging, allreduce)


@pytest.mark.timeout(300)
def test_sharding_trains_the_same_model_as_ddp(tmp_path):
    """FSDP and DeepSpeed's ZeRO-3 compute what DDP computes (the same averaged gradients, the same SGD
    step), only sharded: after 10 steps from the same start their parameters match DDP's, and so do their
    evaluations (a sharded model gathers its parameters for them)."""
    every = ("--max-steps", "10", "--eval-every", "5", "--eval-batches", "2")
    runs = {
        name: start_ranks(tmp_path / name, strategy, 2, *every, *extra)
        for name, strategy, extra in (
            ("ddp", "ddp", ()),
            ("fsdp", "fsdp", ()),
            ("deepspeed-z3", "deepspeed", ("--zero-stage", "3")),
        )
    }
    finals = {}
    for name, ranks in runs.items():
        assert finish(ranks, 200) == [0, 0], [p.log_path.read_text()[-2000:] for p in ranks]
        finals[name] = read_summary(ranks[0].results)["strategy_details"]
    for name in ("fsdp", "deepspeed-z3"):
        assert finals[name]["final_params_sample"] == pytest.approx(
            finals["ddp"]["final_params_sample"], abs=1e-5
        )
        assert finals[name]["final_params_norm"] == pytest.approx(
            finals["ddp"]["final_params_norm"], rel=1e-5
        )
        evals = [read_evals(ranks[0].results) for ranks in (runs["ddp"], runs[name])]
        assert [row["step"] for row in evals[1]] == [5, 10]
        losses = [[row["val_loss"] for row in rows] for rows in evals]
        assert losses[1] == pytest.approx(losses[0], rel=1e-4)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed"])  # DeepSpeed's collectives: on the default group
def test_a_killed_rank_ends_the_run_for_the_others(tmp_path, strategy):
    processes = start_ranks(tmp_path, strategy, 2, "--max-steps", "100000", "--averaging-timeout", "10")
    survivor, victim = processes
    deadline = time.monotonic() + 90
    while len(read_steps(survivor.results)) < 20:
        assert time.monotonic() < deadline and survivor.poll() is None, survivor.log_path.read_text()[-2000:]
        time.sleep(0.5)
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    code = survivor.wait(timeout=60)
    assert time.monotonic() - killed < 10 + 15, "the survivor waited past the averaging timeout"
    assert code == 1
    summary = read_summary(survivor.results)
    assert summary["exit_reason"] == "error" and summary["complete"] is False
    assert summary["steps"] >= 20 and len(read_steps(survivor.results)) == summary["steps"]


@pytest.mark.timeout(60)
def test_an_unreachable_rendezvous_is_one_clear_error(tmp_path):
    (rank_one,) = start_ranks(tmp_path, "ddp", 2, "--start-timeout", "5", ranks=[1])
    started = time.monotonic()
    code = rank_one.wait(timeout=45)
    output = rank_one.log_path.read_text()
    assert code == 3, output[-2000:]
    assert time.monotonic() - started < 40
    assert "trainer: error: rendezvous at 127.0.0.1:" in output and "did not complete within 5s" in output


def test_bad_rank_is_refused_before_anything_starts(tmp_path):
    command = trainer_command(
        "run", "--strategy", "zero", "--peers", "2", "--rank", "2", "--dataset", "synthetic",
        "--results-dir", str(tmp_path / "r"),
    )  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "rank must be 0 .. peers - 1 = 1 (rank=2)" in done.stderr
    assert not (tmp_path / "r" / "steps.csv").exists()
