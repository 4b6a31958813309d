"""Metric names, types, labels and buckets as docs/architecture.md names them."""

from __future__ import annotations

import math
import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from experiment.results import ROUND_CAUSES, RoundRecord, StepRecord
from trainer.config import RunConfig
from trainer.telemetry import BASE_LABELS, BUCKETS, EXTRA_LABELS, METRICS, Telemetry

DOCUMENTED = {
    "trainer_step_seconds": "histogram",
    "trainer_data_loading_seconds": "histogram",
    "trainer_compute_seconds": "histogram",
    "trainer_optimizer_seconds": "histogram",
    "trainer_step_averaging_seconds": "histogram",
    "trainer_averaging_seconds": "histogram",
    "trainer_steps_total": "counter",
    "trainer_samples_total": "counter",
    "trainer_averaging_rounds_total": "counter",
    "trainer_averaging_failures_total": "counter",
    "trainer_matchmaking_seconds": "histogram",
    "trainer_averaging_received_share": "gauge",
    "trainer_averaging_bytes_total": "counter",
    "trainer_loss": "gauge",
    "trainer_hivemind_epoch": "gauge",
    "trainer_peers": "gauge",
    "trainer_collective_samples": "gauge",
    "trainer_target_batch_size": "gauge",
    "trainer_time_dilation": "gauge",
    "trainer_start_timestamp_seconds": "gauge",
    "trainer_memory_bytes": "gauge",
    "trainer_run_info": "gauge",
}


def families_by_exposed_name(text: str) -> dict[str, object]:
    """Parsed families keyed as METRICS keys them (the parser strips ``_total`` from counter names)."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        found[name] = family
    return found


def check_exposition(text: str, *, run_id: str, peer: str, strategy: str) -> dict[str, object]:
    """Every documented family is present with its type; every sample carries run_id/peer/strategy."""
    families = families_by_exposed_name(text)
    for name, kind in METRICS.items():
        assert name in families, f"{name} missing from /metrics"
        family = families[name]
        assert family.type == kind, name
        assert family.samples, f"{name} has no series"
        for sample in family.samples:
            assert {k: sample.labels.get(k) for k in BASE_LABELS} == {
                "run_id": run_id,
                "peer": peer,
                "strategy": strategy,
            }, sample
            for label in EXTRA_LABELS.get(name, ()):
                assert label in sample.labels, (name, label)
    return families


def test_metric_table_matches_the_contract() -> None:
    assert METRICS == DOCUMENTED
    assert BUCKETS[0] == 0.001 and BUCKETS[-1] == 300.0 and list(BUCKETS) == sorted(BUCKETS)


def test_every_series_exists_at_zero_from_startup() -> None:
    telemetry = Telemetry(run_id="r1", peer="peer-01", strategy="hivemind")
    telemetry.set_run_info(RunConfig(strategy="hivemind"))
    families = check_exposition(
        generate_latest(telemetry.registry).decode(), run_id="r1", peer="peer-01", strategy="hivemind"
    )
    rounds = families["trainer_averaging_rounds_total"]
    combos = {(s.labels["kind"], s.labels["outcome"]) for s in rounds.samples if s.name.endswith("_total")}
    assert combos == {(k, o) for k in ("gradients", "parameters") for o in ("ok", "failed", "timeout")}
    assert all(s.value == 0 for s in rounds.samples if s.name.endswith("_total"))
    failures = [s for s in families["trainer_averaging_failures_total"].samples if s.name.endswith("_total")]
    causes = {(s.labels["kind"], s.labels["cause"]) for s in failures}
    assert causes == {(k, c) for k in ("gradients", "parameters") for c in ROUND_CAUSES}
    assert all(s.value == 0 for s in failures)
    received = families["trainer_averaging_received_share"].samples
    assert {s.labels["kind"] for s in received} == {"gradients", "parameters"}
    assert all(math.isnan(s.value) for s in received)  # no round yet: not "received nothing"
    buckets = {s.labels["le"] for s in families["trainer_step_seconds"].samples if s.name.endswith("_bucket")}
    assert {"0.001", "300.0", "+Inf"} <= buckets
    step_averaging = families["trainer_step_averaging_seconds"].samples
    assert {s.labels["le"] for s in step_averaging if s.name.endswith("_bucket")} == buckets
    assert all(s.value == 0 for s in step_averaging)


def test_observations_reach_the_right_series() -> None:
    telemetry = Telemetry(run_id="r1", peer="peer-01", strategy="hivemind")
    telemetry.set_run_info(RunConfig(strategy="hivemind", target_batch_size=512, time_dilation=4.5))
    record = StepRecord(
        step=1,
        timestamp=1.0,
        data_seconds=0.002,
        compute_seconds=0.2,
        optimizer_seconds=1.5,
        averaging_seconds=1.2,
        step_seconds=1.702,
        samples=32,
        loss=2.1,
        hivemind_epoch=3,
        peers=2,
    )
    telemetry.observe_step(record, collective_samples=96)
    telemetry.observe_round(
        RoundRecord(timestamp=1.0, epoch=3, kind="gradients", outcome="ok", allreduce_seconds=0.7)
    )
    telemetry.observe_round(RoundRecord(timestamp=2.0, epoch=3, kind="parameters", outcome="timeout"))
    value = telemetry.registry.get_sample_value
    base = telemetry.base_labels
    assert value("trainer_steps_total", base) == 1 and value("trainer_samples_total", base) == 32
    assert value("trainer_loss", base) == 2.1 and value("trainer_hivemind_epoch", base) == 3
    assert value("trainer_peers", base) == 2 and value("trainer_collective_samples", base) == 96
    assert value("trainer_target_batch_size", base) == 512 and value("trainer_time_dilation", base) == 4.5
    assert value("trainer_optimizer_seconds_bucket", {**base, "le": "1.0"}) == 0
    assert value("trainer_optimizer_seconds_bucket", {**base, "le": "2.5"}) == 1
    # the step's blocking time on averaging, per step, beside the per-round all-reduce time
    assert value("trainer_step_averaging_seconds_sum", base) == 1.2
    assert value("trainer_step_averaging_seconds_count", base) == 1
    assert value("trainer_step_averaging_seconds_bucket", {**base, "le": "1.0"}) == 0
    assert value("trainer_step_averaging_seconds_bucket", {**base, "le": "2.5"}) == 1
    ok = {**base, "kind": "gradients", "outcome": "ok"}
    assert (
        value("trainer_averaging_rounds_total", ok) == 1 and value("trainer_averaging_seconds_sum", ok) == 0.7
    )
    timeout = {**base, "kind": "parameters", "outcome": "timeout"}
    assert value("trainer_averaging_rounds_total", timeout) == 1
    assert value("trainer_averaging_seconds_count", timeout) == 0  # nothing measured, nothing observed


def test_round_health_failures_by_cause_matchmaking_and_the_received_share() -> None:
    """What a dashboard needs to show failed rounds while the run goes on."""
    telemetry = Telemetry(run_id="r1", peer="peer-01", strategy="hivemind")
    value = telemetry.registry.get_sample_value
    base = telemetry.base_labels
    telemetry.observe_round(
        RoundRecord(timestamp=1.0, epoch=1, kind="gradients", outcome="ok", group_size=2,
                    matchmaking_seconds=0.4, allreduce_seconds=0.2, received_share=1.0)
    )  # fmt: skip
    partial = RoundRecord(
        timestamp=2.0, epoch=2, kind="gradients", outcome="failed", group_size=2, matchmaking_seconds=0.3,
        allreduce_seconds=0.5, error="partial: received 81.9% of the averaged results", received_share=0.819,
    )  # fmt: skip
    telemetry.observe_round(partial)
    lone = RoundRecord(timestamp=3.0, epoch=3, kind="parameters", outcome="failed", matchmaking_seconds=2.0,
                       error="AllreduceException: Averaging step failed: could not find a group")  # fmt: skip
    telemetry.observe_round(lone)
    assert (partial.cause, lone.cause) == ("partial", "no_group")
    gradients, parameters = {**base, "kind": "gradients"}, {**base, "kind": "parameters"}
    assert value("trainer_averaging_failures_total", {**gradients, "cause": "partial"}) == 1
    assert value("trainer_averaging_failures_total", {**parameters, "cause": "no_group"}) == 1
    assert value("trainer_averaging_failures_total", {**gradients, "cause": "no_group"}) == 0
    assert value("trainer_matchmaking_seconds_count", gradients) == 2
    assert value("trainer_matchmaking_seconds_sum", gradients) == 0.7
    assert value("trainer_matchmaking_seconds_count", parameters) == 1  # all of a lone round: matchmaking
    assert value("trainer_averaging_received_share", gradients) == 0.819  # the last round's
    assert math.isnan(value("trainer_averaging_received_share", parameters))  # no all-reduce ran


def test_exporter_on_a_free_port() -> None:
    telemetry = Telemetry(run_id="r2", peer="p", strategy="baseline")
    telemetry.set_run_info(RunConfig())
    port = telemetry.start_exporter(0, "127.0.0.1")
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            check_exposition(response.read().decode(), run_id="r2", peer="p", strategy="baseline")
    finally:
        telemetry.stop_exporter()
