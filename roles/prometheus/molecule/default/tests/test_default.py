"""Prometheus runs on the monitor's address, loads the rules and scrapes the inventory's targets."""

import json
import time

import pytest

PORT = 9090


@pytest.fixture(scope="module")
def address(host):
    return host.interface.default().addresses[0]


def api(host, address, path):
    out = host.check_output(
        f"python3 -c \"import urllib.request as u; print(u.urlopen('http://{address}:{PORT}{path}').read().decode())\""
    )
    return json.loads(out)["data"]


def test_service_running(host):
    service = host.service("prometheus")
    if not service.is_running:
        print(host.run("journalctl -u prometheus --no-pager -n 50").stdout)
    assert service.is_running
    assert service.is_enabled


def test_command_line(host, address):
    args = host.file("/etc/default/prometheus").content_string
    assert f"--web.listen-address={address}:{PORT}" in args
    assert "--storage.tsdb.retention.time=2d" in args


def test_listens_on_cluster_address_only(host, address):
    assert host.socket(f"tcp://{address}:{PORT}").is_listening
    assert not host.socket(f"tcp://0.0.0.0:{PORT}").is_listening


def test_config_valid(host):
    host.run_expect([0], "promtool check config /etc/prometheus/prometheus.yml")


def test_rules_loaded(host, address):
    groups = api(host, address, "/api/v1/rules")["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert {"TrainerExporterDown", "AveragingRoundsFailing", "DataLoadingBottleneck"} <= names
    assert "peer:trainer_data_loading_share:ratio_rate1m" in names


def test_targets_from_inventory_healthy(host, address):
    deadline = time.monotonic() + 40
    while True:
        targets = api(host, address, "/api/v1/targets")["activeTargets"]
        health = {(t["labels"]["job"], t["labels"].get("host")): t["health"] for t in targets}
        # Prometheus's own target as well: each is "unknown" until its first scrape
        wanted = [("node", "mon-prom-peer"), ("node", "mon-prom-monitor"), ("prometheus", "mon-prom-monitor")]
        if all(health.get(key) == "up" for key in wanted):
            break
        assert time.monotonic() < deadline, f"targets not healthy: {targets}"
        time.sleep(2)
    # no trainer runs in this scenario: its target exists (labelled from the inventory) but is down
    trainer = [t for t in targets if t["labels"]["job"] == "trainer"]
    assert [t["labels"]["peer"] for t in trainer] == ["mon-prom-peer"]
    assert trainer[0]["scrapeUrl"].endswith(":9410/metrics")
