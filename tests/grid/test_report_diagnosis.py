"""trainer report names each run's bound with its evidence and knob, and predicts the Hivemind speedup:
results built to be data-, compute-, communication- and coordination-bound, a straggler and a
starved host are each diagnosed; the prediction matches a hand computation."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.data import Experiment, PeerRun


def _steps(data: float, compute: float, averaging: float, count: int = 16, per_epoch: int = 4) -> list[dict]:
    rows, wall = [], 0.0
    for step in range(1, count + 1):
        ends_epoch = step % per_epoch == 0
        wait = averaging * per_epoch if ends_epoch else 0.0  # the epoch's whole wait falls on its last step
        step_seconds = data + compute + wait
        wall += step_seconds
        rows.append(
            {
                "step": step,
                "wall_seconds": wall,
                "data_seconds": data,
                "compute_seconds": compute,
                "optimizer_seconds": wait,
                "averaging_seconds": wait,
                "step_seconds": step_seconds,
                "samples": 32,
                "loss": 1.0,
                "hivemind_epoch": step // per_epoch,
                "peers": 2,
            }
        )
    return rows


def _rounds(allreduce: float, blocking: float, epochs: int = 4) -> list[dict]:
    return [
        {
            "epoch": e,
            "kind": "gradients",
            "outcome": "ok",
            "allreduce_seconds": allreduce,
            "blocking_seconds": blocking,
        }
        for e in range(epochs)
    ]


def _run(name: str, peers: list[PeerRun], hosts: dict | None = None, **settings) -> Experiment:
    base = {"strategy": "hivemind", "peers": len(peers), "model": "smallcnn", "dataset": "synthetic",
            "batch_size": 32, "learning_rate": 0.01, "target_batch_size": 256}  # fmt: skip
    return Experiment(name, Path(name), base | settings, True, peers, hosts=hosts or {})


def _peer(name: str, data: float, compute: float, averaging: float, allreduce: float) -> PeerRun:
    return PeerRun(name, _steps(data, compute, averaging), _rounds(allreduce, averaging * 4), True)


def _probed(used: float, loaded: float) -> dict:
    """Two 1-core hosts: peer-01 served in full, peer-02 used `used` cores over the run, `loaded` probed."""
    full = {"cpus_limit": 1.0, "cpu_received": {"cores_used": 0.95}, "cpu_probe": {"cores_used": 0.98}}
    second = {"cpus_limit": 1.0, "cpu_received": {"cores_used": used}, "cpu_probe": {"cores_used": loaded}}
    return {"peer-01": full, "peer-02": second}


@pytest.fixture
def diagnosis():
    experiments = [
        _run("data", [_peer(f"peer-0{i}", 0.5, 0.1, 0.01, 0.04) for i in (1, 2)]),
        _run("compute", [_peer(f"peer-0{i}", 0.01, 0.5, 0.02, 0.08) for i in (1, 2)]),
        # averaging 0.4 s per step, of which the all-reduce is 1.4 of the 1.6 s per epoch
        _run("communication", [_peer(f"peer-0{i}", 0.01, 0.1, 0.4, 1.4) for i in (1, 2)]),
        # averaging 0.4 s per step, all-reduce only 0.1 of the 1.6 s per epoch: waiting for the group
        _run("coordination", [_peer(f"peer-0{i}", 0.01, 0.1, 0.4, 0.1) for i in (1, 2)]),
        _run(
            "host",
            [_peer(f"peer-0{i}", 0.01, 0.5, 0.02, 0.08) for i in (1, 2)],
            hosts={
                "peer-01": {"cpus_limit": 1.0, "cpu_received": {"cores_used": 0.95}},
                "peer-02": {"cpus_limit": 1.0, "cpu_received": {"cores_used": 0.5}},
            },  # fmt: skip
        ),
        # the CPU probe decides where it ran: peer-02 used little over the run but got its core under load ...
        _run("probed", [_peer(f"peer-0{i}", 0.01, 0.5, 0.02, 0.08) for i in (1, 2)], _probed(0.5, 0.97)),
        # ... and peer-02 here did not
        _run("starved", [_peer(f"peer-0{i}", 0.01, 0.5, 0.02, 0.08) for i in (1, 2)], _probed(0.9, 0.33)),
    ]
    # a straggler: peer-02 computes 4x slower; peer-01 waits for it at every epoch end
    slow = PeerRun("peer-02", _steps(0.01, 0.4, 0.01), _rounds(0.02, 0.04), True)
    fast = PeerRun("peer-01", _steps(0.01, 0.1, 0.3), _rounds(0.02, 1.2), True)
    experiments.append(_run("straggler", [fast, slow]))
    analysis = analyse(experiments, target_loss=None, bandwidth=None)
    return {row["experiment_id"]: row for row in analysis.tables["diagnosis"].rows}


@pytest.mark.parametrize("name", ["data", "compute", "communication", "coordination", "host", "straggler"])
def test_each_bound_is_named(diagnosis, name):
    row = diagnosis[name]
    assert row["bound"] == name, row
    assert row["knob"] and row["evidence"]


def test_the_cpu_probe_decides_whether_a_host_was_starved(diagnosis):
    assert diagnosis["probed"]["bound"] == "compute", diagnosis["probed"]
    starved = diagnosis["starved"]
    assert starved["bound"] == "host", starved
    assert "peer-02 received 0.33 of 1.00 cores under full load" in starved["evidence"], starved


def test_the_compute_knob_names_parameter_rounds_only_for_hivemind_averaging_gradients(diagnosis):
    assert "average_state_every" in diagnosis["compute"]["knob"]  # hivemind, no local updates
    local = analyse(
        [_run("lu", [_peer(f"peer-0{i}", 0.01, 0.5, 0.02, 0.08) for i in (1, 2)], local_updates=True)],
        target_loss=None,
        bandwidth=None,
    )
    [row] = local.tables["diagnosis"].rows
    assert row["bound"] == "compute" and "average_state_every" not in row["knob"]


def test_the_communication_knob_names_compression_while_a_hivemind_run_sent_uncompressed(diagnosis):
    assert "compression=fp16" in diagnosis["communication"]["knob"]
    peers = [_peer(f"peer-0{i}", 0.01, 0.1, 0.4, 1.4) for i in (1, 2)]
    compressed = analyse([_run("fp16", peers, compression="fp16")], target_loss=None, bandwidth=None)
    [row] = compressed.tables["diagnosis"].rows
    assert row["bound"] == "communication" and "compression" not in row["knob"], row


def test_evidence_gives_the_shares(diagnosis):
    row = diagnosis["communication"]
    step = 0.01 + 0.1 + 0.4
    assert row["communication_share"] == pytest.approx(1.4 / 4 / step)
    assert row["coordination_share"] == pytest.approx((1.6 - 1.4) / 4 / step)
    assert row["evidence"].startswith("communication ")
    assert "peer-02 used 0.50 of 1.00 cores" in diagnosis["host"]["evidence"]
    assert diagnosis["straggler"]["evidence"].startswith("straggler peer-02")


def test_prediction_against_a_hand_computation():
    # baseline: 64 samples/s; 2 peers, batch 32, TBS 256: 4 steps per epoch of 0.2 s without averaging;
    # matchmaking 1 s, M = 400 kB (as the peers measured), B = 1e6 B/s
    baseline = Experiment(
        "base", Path("base"),
        {"strategy": "baseline", "peers": 1, "model": "smallcnn", "dataset": "synthetic", "batch_size": 32,
         "learning_rate": 0.01},
        True, [PeerRun("baseline", _steps(0.0, 0.5, 0.0), [], True)],
    )  # fmt: skip
    m = 400_000  # the parameter bytes the peers' trainers measured
    peers = [_peer(f"peer-0{i}", 0.0, 0.2, 0.5, 0.3) for i in (1, 2)]
    for peer in peers:
        peer.summary = {"memory": {"parameter_bytes": m}}
    hivemind = _run("hm", peers, matchmaking_time=1.0)
    hivemind.bandwidth_bytes_per_second = 1e6
    analysis = analyse([baseline, hivemind], target_loss=None, bandwidth=None)
    (row,) = analysis.tables["prediction"].rows
    compute = 256 / (2 * 32) * 0.2
    # the gradient all-reduce and, every epoch (average_state_every 1), the state round's bytes on the link
    communicate = 1.0 + (1 + 1) * 2 * (2 - 1) / 2 * m / 1e6
    assert (row["matchmaking_s"], row["matchmaking_from"]) == (1.0, "setting")  # the rounds measured none
    assert row["compute_s"] == pytest.approx(compute)
    assert row["communicate_s"] == pytest.approx(communicate)
    assert row["granularity"] == pytest.approx(compute / communicate)
    baseline_rate = 32 / 0.5
    assert row["predicted_speedup"] == pytest.approx(256 / (compute + communicate) / baseline_rate)
    measured = 2 * 16 * 32 / (16 * 0.2 + 4 * 2.0) / baseline_rate
    assert row["measured_speedup"] == pytest.approx(measured)
    assert row["error"] == pytest.approx(row["predicted_speedup"] / measured - 1)
    # where the rounds measured matchmaking, the prediction takes their median, not the setting
    for peer in peers:
        for round_, seconds in zip(peer.rounds, (0.5, 0.6, 0.7, 0.6), strict=True):
            round_["matchmaking_seconds"] = seconds
    hivemind.settings["average_state_every"] = 2
    (row,) = analyse([baseline, hivemind], target_loss=None, bandwidth=None).tables["prediction"].rows
    assert (row["matchmaking_s"], row["matchmaking_from"]) == (0.6, "rounds")
    assert row["communicate_s"] == pytest.approx(0.6 + 1.5 * m / 1e6)


def test_the_preprocessing_table_compares_data_pipelines_per_model():
    """Each baseline on an image folder with its preprocessing and workers, its data-loading share,
    and the factor between the slowest and the fastest pipeline of one model; other runs stay out."""
    from controller.report.network import preprocessing_factors

    def baseline(name: str, data: float, preprocessing: str, workers: int) -> Experiment:
        peer = PeerRun("baseline", _steps(data, 0.010, 0.0), [], True)
        settings = {"strategy": "baseline", "peers": 1, "model": "smallcnn", "dataset": "imagefolder",
                    "batch_size": 32, "learning_rate": 0.01,
                    "preprocessing": preprocessing, "data_workers": workers}  # fmt: skip
        return Experiment(name, Path(name), settings, True, [peer], hosts={})

    experiments = [
        baseline("decode-w0", 0.030, "decode", 0),
        baseline("cached-w0", 0.0005, "cached", 0),
        baseline("decode-w2", 0.010, "decode", 2),
        _run("unrelated", [_peer("peer-01", 0.001, 0.010, 0.0, 0.0)]),
    ]
    analysis = analyse(experiments, target_loss=None, bandwidth=None)
    rows = {row["experiment_id"]: row for row in analysis.tables["preprocessing"].rows}
    assert set(rows) == {"decode-w0", "cached-w0", "decode-w2"}
    assert rows["decode-w0"]["data_share"] == pytest.approx(0.030 / 0.040)
    assert rows["cached-w0"]["data_share"] == pytest.approx(0.0005 / 0.0105)
    assert rows["decode-w0"]["speed_vs_slowest"] == pytest.approx(1.0)
    assert rows["cached-w0"]["speed_vs_slowest"] == pytest.approx(0.040 / 0.0105)
    assert [e.label() for e in experiments[:3]] == [
        "baseline bs32 lr0.01 decode", "baseline bs32 lr0.01 cached", "baseline bs32 lr0.01 decode w2"
    ]  # fmt: skip
    [line] = preprocessing_factors(analysis.tables["preprocessing"])
    assert line.startswith(
        f"smallcnn on imagefolder: {0.040 / 0.0105:.2f}x between the slowest (decode, 0 workers)"
    )


def test_model_size_is_what_the_trainers_measured():
    """M per model: the largest parameter_bytes any peer's summary.json holds; none measured, none known."""
    from controller.report.metrics import model_bytes

    sharded = [_peer(f"peer-0{i}", 0.0, 0.2, 0.5, 0.3) for i in (1, 2)]
    sharded[0].summary = {"memory": {"parameter_bytes": 300}}
    sharded[1].summary = {"memory": {"parameter_bytes": 500}}
    unmeasured = [_peer("peer-01", 0.0, 0.2, 0.5, 0.3)]  # e.g. a run stopped before its loop ended
    experiments = [_run("a", sharded), _run("b", unmeasured, model="resnet18")]
    assert model_bytes(experiments) == {"smallcnn": 500}
