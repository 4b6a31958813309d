"""trainer report on runs over shaped links: averaging share per link rate and where a setting turns
communication-bound, from results built with known step times (numbers checked by hand)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from controller.report.analysis import analyse
from controller.report.command import write_report
from controller.report.data import Experiment, PeerRun


def _steps(compute: float, averaging: float, count: int = 20) -> list[dict]:
    rows, wall = [], 0.0
    for step in range(1, count + 1):
        step_seconds = 0.01 + compute + averaging + 0.001
        wall += step_seconds
        rows.append(
            {
                "step": step,
                "wall_seconds": wall,
                "data_seconds": 0.01,
                "compute_seconds": compute,
                "optimizer_seconds": averaging + 0.001,
                "averaging_seconds": averaging,
                "step_seconds": step_seconds,
                "samples": 32,
                "loss": 2.0 - step * 0.01,
                "hivemind_epoch": step // 5,
                "peers": 2,
            }
        )
    return rows


def _hivemind(name: str, peers: int, rate: float | None, compute: float, averaging: float) -> Experiment:
    settings = {
        "strategy": "hivemind",
        "peers": peers,
        "model": "smallcnn",
        "dataset": "synthetic",
        "batch_size": 32,
        "learning_rate": 0.01,
        "target_batch_size": 256,
        "local_updates": False,
        "bandwidth_mbit": rate,
    }
    runs = [PeerRun(f"peer-{i + 1:02d}", _steps(compute, averaging), [], True) for i in range(peers)]
    return Experiment(
        name, Path(name), settings, True, runs, bandwidth_bytes_per_second=rate and rate * 1.2e5
    )


@pytest.fixture
def analysis():
    experiments = [
        # 2 peers: averaging falls with the rate; communication-bound at 10 and 30 Mbit/s
        _hivemind("p2-10", 2, 10, compute=0.2, averaging=0.8),
        _hivemind("p2-30", 2, 30, compute=0.2, averaging=0.3),
        _hivemind("p2-100", 2, 100, compute=0.2, averaging=0.1),
        # 4 peers: communication-bound at every rate tried
        _hivemind("p4-100", 4, 100, compute=0.1, averaging=0.5),
        _hivemind("p4-1000", 4, 1000, compute=0.1, averaging=0.2),
        # unshaped: not in the network tables
        _hivemind("p2-free", 2, None, compute=0.2, averaging=0.05),
    ]
    return analyse(experiments, target_loss=None, bandwidth=None)


def test_network_table_gives_shares_and_the_bound(analysis):
    rows = {row["experiment_id"]: row for row in analysis.tables["network"].rows}
    assert set(rows) == {"p2-10", "p2-30", "p2-100", "p4-100", "p4-1000"}
    row = rows["p2-10"]
    step = 0.01 + 0.2 + 0.8 + 0.001
    assert row["averaging_share"] == pytest.approx(0.8 / step)
    assert row["compute_share"] == pytest.approx(0.2 / step)
    assert row["measured_mbit"] == pytest.approx(10 * 1.2e5 * 8 / 1e6)
    assert row["setting"] == "2p tbs256 noLU 10Mbit"
    assert [rows[name]["bound"] for name in ("p2-10", "p2-30", "p2-100")] == [
        "averaging",
        "averaging",
        "compute",
    ]
    assert rows["p2-100"]["samples_per_second"] > rows["p2-10"]["samples_per_second"]


def test_thresholds_per_setting(analysis):
    rows = {row["peers"]: row for row in analysis.tables["network_thresholds"].rows}
    assert rows[2]["rates_mbit"] == "10 30 100"
    assert rows[2]["communication_bound_mbit"] == "10 30"
    assert rows[2]["communication_bound_up_to_mbit"] == 30.0
    assert rows[2]["not_communication_bound_from_mbit"] == 100.0
    assert rows[4]["communication_bound_up_to_mbit"] == 1000.0
    assert rows[4]["not_communication_bound_from_mbit"] is None


def test_report_shows_the_network_plot_and_tables(analysis, tmp_path):
    report = write_report(analysis, tmp_path, tmp_path).read_text()
    assert "![network](network.png)" in report and "`network_thresholds.csv`" in report
    assert (tmp_path / "network.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "network.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 5


def _peer_steps(step_seconds: float, steps_per_epoch: int, epochs: int, wait: dict[int, float]) -> list[dict]:
    """A peer that computes ``step_seconds`` per step and, at the end of epoch e, waits ``wait[e]``."""
    rows, wall = [], 0.0
    for step in range(1, steps_per_epoch * epochs + 1):
        epoch_before = (step - 1) // steps_per_epoch
        ends_epoch = step % steps_per_epoch == 0
        averaging = wait.get(epoch_before, 0.0) if ends_epoch else 0.0
        wall += step_seconds + averaging
        rows.append(
            {
                "step": step,
                "wall_seconds": wall,
                "data_seconds": 0.0,
                "compute_seconds": step_seconds,
                "optimizer_seconds": averaging,
                "averaging_seconds": averaging,
                "step_seconds": step_seconds + averaging,
                "samples": 32,
                "loss": 1.0,
                "hivemind_epoch": epoch_before + (1 if ends_epoch else 0),
                "peers": 2,
            }
        )
    return rows


def test_peers_table_names_who_waited_for_whom():
    # epoch 0: the fast peer arrives at 1.0 s, the slow one at 2.0 s; the fast one waits 1.0 + 0.5 s of
    # all-reduce, the slow one 0.5 s: both leave at 2.5 s. Epoch 1 likewise (arrivals 3.5 and 4.5 s).
    fast = _peer_steps(0.25, 4, 2, {0: 1.5, 1: 1.5})
    slow = _peer_steps(0.5, 4, 2, {0: 0.5, 1: 0.5})
    # peer-01's link: 100 Mbit/s modelled, shaped to 100 / D = 50 locally (D = 2)
    hosts = {
        "peer-01": {"vcpus": 2, "bandwidth_mbit": 50.0, "modelled_bandwidth_mbit": 100.0},
        "peer-02": {"vcpus": 1},
    }
    experiment = Experiment(
        "hetero",
        Path("hetero"),
        {"strategy": "hivemind", "peers": 2, "model": "smallcnn", "batch_size": 32, "target_batch_size": 256},
        True,
        [PeerRun("peer-01", fast, [], True), PeerRun("peer-02", slow, [], True)],
        hosts=hosts,
    )
    rows = {
        row["peer"]: row
        for row in analyse([experiment], target_loss=None, bandwidth=None).tables["peers"].rows
    }
    assert rows["peer-01"]["epochs_ended"] == rows["peer-02"]["epochs_ended"] == 2
    assert (rows["peer-01"]["last_arrivals"], rows["peer-02"]["last_arrivals"]) == (0, 2)
    assert rows["peer-01"]["mean_wait_for_others_s"] == pytest.approx(1.0)
    assert rows["peer-02"]["mean_wait_for_others_s"] == pytest.approx(0.0)
    assert rows["peer-01"]["contribution"] == pytest.approx(0.5)  # equal steps here: equal samples
    assert (rows["peer-01"]["vcpus"], rows["peer-02"]["vcpus"]) == (2, 1)
    # both link rates: the modelled VM's and the one applied here
    assert (rows["peer-01"]["modelled_bandwidth_mbit"], rows["peer-01"]["applied_bandwidth_mbit"]) == (
        100.0,
        50.0,
    )
    assert rows["peer-01"]["compute_ms"] == pytest.approx(250)


def _round(number: int, rate: float | None, seconds: float = 2.0, outcome: str = "ok") -> dict:
    sent = None if rate is None else int(rate * 1e6 / 8 * seconds)
    return {
        "round": number,
        "epoch": number,
        "kind": "gradients",
        "outcome": outcome,
        "group_size": 2,
        "allreduce_seconds": seconds,
        "sent_bytes": sent,
        "received_bytes": sent,
        "sent_mbit_per_second": rate,
    }


def test_link_rates_per_peer_and_per_round_mark_rounds_under_half_the_shaped_rate(tmp_path):
    """Each counted round's modelled rate against the peer's shaped (modelled) rate."""
    hosts = {
        peer: {"bandwidth_mbit": 25.0, "modelled_bandwidth_mbit": 100.0} for peer in ("peer-01", "peer-02")
    }
    steps = _steps(0.1, 0.1)
    peers = [
        PeerRun("peer-01", steps, [_round(1, 80.0), _round(2, 30.0), _round(3, 60.0), _round(4, None)], True),
        # a failed round counts its bytes but has no rate
        PeerRun("peer-02", steps, [_round(1, 90.0), _round(2, 10.0, outcome="timeout")], True),
    ]
    settings = {"strategy": "hivemind", "peers": 2, "model": "smallcnn", "bandwidth_mbit": 100}
    counted = Experiment("counted", Path("counted"), settings, True, peers, hosts=hosts)
    uncounted = _hivemind("uncounted", 2, 100, compute=0.2, averaging=0.1)
    result = analyse([counted, uncounted], target_loss=None, bandwidth=None)

    rows = {row["peer"]: row for row in result.tables["link_rates"].rows}
    assert set(rows) == {"peer-01", "peer-02"}  # the run without counts has no rows
    first = rows["peer-01"]
    assert first["rounds_counted"] == 3 and first["shaped_mbit"] == 100.0  # the modelled rate, not / D
    assert first["median_mbit"] == pytest.approx(60.0) and first["lowest_mbit"] == pytest.approx(30.0)
    assert first["rounds_under_half"] == 1
    assert first["sent_mb"] == pytest.approx((80 + 30 + 60) * 2 / 8)
    assert first["sent_bytes_per_sample"] == pytest.approx((80 + 30 + 60) * 2e6 / 8 / (20 * 32))
    assert rows["peer-02"]["rounds_counted"] == 2 and rows["peer-02"]["rounds_under_half"] == 0
    assert first["bytes_from"] == "rounds"  # no run total (an older trainer): the rounds' sum
    assert result.tables["experiments"].rows[0]["hivemind_bytes_per_sample"] is None

    # the trainer's run total, where it has one, rather than the rounds' sum (overlapping rounds hold both)
    whole = {"sent_bytes": 32_000_000, "received_bytes": 16_000_000}
    for peer in peers:
        peer.summary["strategy_details"] = {"traffic": whole}
    again = analyse([counted], target_loss=None, bandwidth=None)
    (exact, _) = again.tables["link_rates"].rows
    assert (exact["bytes_from"], exact["sent_mb"], exact["received_mb"]) == ("run", 32.0, 16.0)
    assert exact["sent_bytes_per_sample"] == pytest.approx(32e6 / (20 * 32))
    per_sample = again.tables["experiments"].rows[0]["hivemind_bytes_per_sample"]
    assert per_sample == pytest.approx(2 * 32e6 / (2 * 20 * 32))

    per_round = [(r["peer"], r["round"], r["under_half"]) for r in result.tables["round_rates"].rows]
    assert per_round == [
        ("peer-01", 1, False),
        ("peer-01", 2, True),
        ("peer-01", 3, False),
        ("peer-02", 1, False),
    ]

    report = write_report(result, tmp_path, tmp_path).read_text()
    assert (
        "- counted peer-01: 1 of its ok rounds got under half its shaped 100 Mbit/s (median 60.0;" in report
    )
    assert (tmp_path / "round_rates.csv").read_text().count("\n") == 5  # the header and four rounds


def test_a_dilated_runs_round_rates_are_modelled():
    from controller.report.data import in_modelled_time

    peers = [PeerRun("peer-01", [], [{**_round(1, 10.0, seconds=8.0), "timestamp": 100.0}], True)]
    modelled = in_modelled_time(Experiment("d", Path("d"), {}, True, peers), 4.0)
    (row,) = modelled.peers[0].rounds
    # the all-reduce took a quarter of its time on the modelled machine: four times the rate, the same bytes
    assert (row["allreduce_seconds"], row["sent_mbit_per_second"]) == (2.0, 40.0)
    assert row["sent_bytes"] == peers[0].rounds[0]["sent_bytes"]


def test_a_cross_traffic_window_compares_its_hosts_rounds_inside_and_outside(tmp_path):
    """The rounds of a cross-traffic window's two hosts that ended inside it against the others,
    and the flow's achieved rate; a host outside the window is not counted."""
    steps = _steps(0.1, 0.1)

    def rounds(rates: list[float]) -> list[dict]:
        return [{**_round(n + 1, rate), "timestamp": 100.0 + 10 * n} for n, rate in enumerate(rates)]

    # rounds end at 100, 110, 120, 130: the window covers 108-125 (the second and third)
    peers = [
        PeerRun("peer-01", steps, rounds([80.0, 20.0, 30.0, 90.0]), True),
        PeerRun("peer-02", steps, rounds([70.0, 40.0, 10.0, 60.0]), True),
        PeerRun("peer-03", steps, rounds([5.0, 5.0, 5.0, 5.0]), True),
    ]
    window = {
        "spec": "cross:peer-01>peer-02@8s+17s=50", "kind": "cross", "host": "peer-01", "target": "peer-02",
        "status": "healed", "rate_mbit": 50.0, "achieved_mbit": 48.5, "applied_at": 108.0, "healed_at": 125.0,
        "applied_seconds": 8.0, "healed_seconds": 25.0,
    }  # fmt: skip
    settings = {"strategy": "hivemind", "peers": 3, "model": "smallcnn", "cross_traffic": "peer-01>peer-02"}
    crossed = Experiment("crossed", Path("crossed"), settings, True, peers, faults=[window])
    result = analyse([crossed], target_loss=None, bandwidth=None)

    (row,) = result.tables["cross_traffic"].rows
    assert (row["rounds_inside"], row["rounds_outside"]) == (4, 4)
    assert row["median_mbit_inside"] == pytest.approx(25.0)  # 20, 30, 40, 10
    assert row["median_mbit_outside"] == pytest.approx(75.0)  # 80, 90, 70, 60
    assert row["achieved_mbit"] == 48.5
    marked = [(r["peer"], r["round"]) for r in result.tables["round_rates"].rows if r["cross_traffic"]]
    assert marked == [("peer-01", 2), ("peer-01", 3), ("peer-02", 2), ("peer-02", 3)]
    report = write_report(result, tmp_path, tmp_path).read_text()
    assert (
        "- crossed cross:peer-01>peer-02@8s+17s=50: the flow achieved 48.5 Mbit/s; "
        "its hosts' rounds: median 25.0 Mbit/s inside against 75.0 outside (4 rounds inside, 4 outside)"
    ) in report
    (one,) = result.tables["cross_traffic_effect"].rows
    assert (one["runs"], one["ratio"], one["verdict"]) == (1, pytest.approx(25 / 75), "needs 2 runs a side")

    # three repeats, each its own control: the window's rounds at a third, a half and 0.4 of the others'
    def repeat(name: str, inside: float) -> Experiment:
        runs = [PeerRun(p.name, steps, rounds([80.0, inside, inside, 80.0]), True) for p in peers[:2]]
        return Experiment(name, Path(name), {**settings, "seed": int(name[-1])}, True, runs, faults=[window])

    repeats = [repeat("r1", 80 / 3), repeat("r2", 40.0), repeat("r3", 32.0)]
    (three,) = analyse(repeats, target_loss=None, bandwidth=None).tables["cross_traffic_effect"].rows
    assert three["runs_compared"] == 3 and three["ratio"] == pytest.approx((1 / 3 * 0.5 * 0.4) ** (1 / 3))
    assert three["ratio_ci_high"] < 1 and three["verdict"] == "lower beyond the noise", three


def test_without_cross_traffic_the_report_has_no_such_section(analysis, tmp_path):
    assert analysis.tables["cross_traffic"].rows == []
    assert "### Cross traffic" not in write_report(analysis, tmp_path, tmp_path).read_text()


def test_compression_and_cross_traffic_are_effects_against_none(tmp_path):
    """grids/communication.yml: per compression and with cross traffic, the bytes the
    peers sent per sample and Hivemind's link rate per round, each against the level `none` with an interval
    and a verdict; no baselines, so the target loss is the worst final loss of the runs and every run has a
    time to it."""

    def run(name: str, rate: float, scale: float, **setting: str) -> Experiment:
        # the same step times and losses; rounds at `rate` Mbit/s; interfaces that sent `scale` of 10 MB
        rounds = [_round(n, rate * (1 + 0.02 * n)) for n in range(1, 4)]
        sent = {"network": {"sent_bytes": int(scale * 10e6 * (1 + 0.01 * int(name[-1])))}}
        peers = [PeerRun(f"peer-0{i}", _steps(0.1, 0.1), rounds, True, sent) for i in (1, 2)]
        settings = {
            **dict(strategy="hivemind", peers=2, model="smallcnn", dataset="synthetic", batch_size=32),
            **dict(learning_rate=0.01, bandwidth_mbit=100, seed=int(name[-1])),
            **setting,
        }
        return Experiment(name, Path(name), settings, True, peers)

    runs = [
        *(run(f"none-{i}", 80.0 + i, 1.0) for i in range(3)),
        *(run(f"fp16-{i}", 80.0 + i, 0.5, compression="fp16") for i in range(3)),
        *(run(f"cross-{i}", 40.0 + i, 1.0, cross_traffic="peer-01>peer-02@1s+5s=60mbit") for i in range(3)),
    ]
    result = analyse(runs, target_loss=None, bandwidth=None)

    rows = result.tables["experiments"].rows
    none = next(row for row in rows if row["experiment_id"] == "none-0")
    assert none["sent_bytes_per_sample"] == pytest.approx(2 * 10e6 / (2 * 20 * 32))  # both peers' 20 steps
    assert none["link_mbit"] == pytest.approx(80.0 * 1.04)  # the median round
    assert all(row["time_to_target_seconds"] is not None for row in rows), rows

    effects = {
        (row["factor"], row["level"], row["metric"]): row
        for row in result.tables["effects"].rows
        if row["metric"] in ("sent_bytes_per_sample", "link_mbit")
    }
    fp16 = effects["compression", "fp16", "sent_bytes_per_sample"]
    assert fp16["reference_level"] == "none" and fp16["n"] == 3
    assert fp16["ratio"] == pytest.approx(0.5, rel=0.02) and fp16["verdict"] == "lower beyond the noise"
    crossed = effects["cross_traffic", "peer-01>peer-02@1s+5s=60mbit", "link_mbit"]
    assert crossed["reference_level"] == "none" and crossed["verdict"] == "lower beyond the noise"
    assert crossed["ratio"] == pytest.approx(41 / 81, rel=0.01)  # the geometric means' ratio
    assert effects["compression", "none", "link_mbit"].get("verdict") is None  # the reference itself
    write_report(result, tmp_path, tmp_path)
    assert (tmp_path / "effect_compression.png").stat().st_size > 0
    assert (tmp_path / "effect_cross_traffic.png").stat().st_size > 0
