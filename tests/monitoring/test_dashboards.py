"""Dashboards: the committed JSON is what dashboards/src/build.py produces, and the panels and the trainer's
exporter agree on metric names in both directions."""

from __future__ import annotations

import importlib.util
import re

import pytest
import yaml
from monitoring_support import (
    DASHBOARDS_DIR,
    REPO,
    load_dashboards,
    load_rules,
    panel_queries,
    recorded_names,
    resolve_families,
    variable_queries,
)

from trainer.telemetry import METRICS


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("dashboards_build", DASHBOARDS_DIR / "src" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dashboards():
    return load_dashboards()


def test_committed_json_is_what_the_source_produces(build):
    produced = build.render()
    committed = {path.name: path.read_text() for path in DASHBOARDS_DIR.glob("*.json")}
    assert set(committed) == set(produced), "a dashboard JSON is missing or has no source"
    for name, text in produced.items():
        assert committed[name] == text, f"dashboards/{name} is stale: run python dashboards/src/build.py"
    assert build.main(["--check"]) == 0


def test_every_panel_metric_is_exported_by_the_trainer(dashboards, rendered):
    rules = load_rules(rendered[1])
    for name, dashboard in dashboards.items():
        for title, expr in panel_queries(dashboard) + variable_queries(dashboard):
            unknown = resolve_families(expr, rules, METRICS) - set(METRICS)
            assert not unknown, f"{name} / {title} reads metrics the trainer does not export: {unknown}"
            missing_rules = recorded_names(expr) - set(rules)
            assert not missing_rules, f"{name} / {title} uses unknown recording rules {missing_rules}"


def test_every_trainer_metric_is_on_a_dashboard(dashboards, rendered):
    rules = load_rules(rendered[1])
    shown = set()
    for dashboard in dashboards.values():
        for _title, expr in panel_queries(dashboard):
            shown |= resolve_families(expr, rules, METRICS)
    assert set(METRICS) - shown == set()


def test_experiment_dashboard(dashboards):
    experiment = dashboards["experiment.json"]
    assert [v["name"] for v in experiment["templating"]["list"]] == ["run_id", "peer"]
    titles = {panel["title"] for panel in experiment["panels"]}
    for wanted in (
        "Step time breakdown",
        "Averaging round",
        "Samples per second",
        "loss",
        "Hivemind epoch",
        "Peers alive",
        "target batch size",
    ):
        assert any(wanted.lower() in title.lower() for title in titles), wanted
    breakdown = next(p for p in experiment["panels"] if p["title"].startswith("Step time breakdown"))
    assert breakdown["repeat"] == "peer"
    assert breakdown["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    components = [t["legendFormat"] for t in breakdown["targets"]]
    assert components == ["data", "compute", "averaging", "other optimizer"]
    for _title, expr in panel_queries(experiment):
        if re.search(r"\btrainer_", expr) or ":" in expr:
            assert 'run_id=~"$run_id"' in expr, expr


def test_hosts_dashboard(dashboards):
    hosts = dashboards["hosts.json"]
    assert [v["name"] for v in hosts["templating"]["list"]] == ["host"]
    exprs = " ".join(expr for _title, expr in panel_queries(hosts))
    for metric in (
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
    ):
        assert metric in exprs


def test_panels_use_the_provisioned_datasource(dashboards):
    template = (REPO / "roles/grafana/templates/datasources.yml.j2").read_text()
    uid = re.search(r"uid: (\S+)", template).group(1)
    for dashboard in dashboards.values():
        for panel in dashboard["panels"]:
            assert panel["datasource"]["uid"] == uid
            assert all(t["datasource"]["uid"] == uid for t in panel["targets"])
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids))
    assert len({d["uid"] for d in dashboards.values()}) == len(dashboards)


def test_provider_path_is_where_the_grafana_role_copies_dashboards():
    provider = yaml.safe_load((DASHBOARDS_DIR / "provisioning/dashboards.yml").read_text())
    role_vars = yaml.safe_load((REPO / "roles/grafana/vars/main.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == role_vars["_grafana_dashboards_dir"]
