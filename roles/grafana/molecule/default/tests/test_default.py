"""Grafana's rendered configuration and provisioning (the package is skipped offline: grafana_install=false).

What a Grafana install would read: grafana.ini (listen address, admin account, anonymous off), the Prometheus
datasource, the dashboard provider and every dashboard of the repository's dashboards/ directory.
"""

import configparser
import hashlib
import json
from pathlib import Path

import pytest
import yaml

DASHBOARDS = Path(__file__).resolve().parents[5] / "dashboards"


@pytest.fixture(scope="module")
def address(host):
    return host.interface.default().addresses[0]


def test_install_step_skipped(host):
    # says plainly what this scenario does not cover
    assert not host.package("grafana").is_installed


def test_grafana_ini(host, address):
    ini = host.file("/etc/grafana/grafana.ini")
    assert ini.mode == 0o640
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(ini.content_string)
    assert parser["server"]["http_addr"] == address
    assert parser["server"]["http_port"] == "3000"
    assert parser["auth.anonymous"]["enabled"] == "false"
    assert parser["users"]["allow_sign_up"] == "false"
    password = parser["security"]["admin_password"]
    assert password.startswith('"""') and len(password.strip('"')) >= 8
    assert parser["paths"]["provisioning"] == "/etc/grafana/provisioning"


def test_datasource(host, address):
    provisioned = yaml.safe_load(
        host.file("/etc/grafana/provisioning/datasources/testbed.yml").content_string
    )
    (datasource,) = provisioned["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["uid"] == "testbed-prometheus"
    assert datasource["url"] == f"http://{address}:9090"


def test_dashboard_provider_points_at_dashboards(host):
    provider = yaml.safe_load(host.file("/etc/grafana/provisioning/dashboards/testbed.yml").content_string)
    path = provider["providers"][0]["options"]["path"]
    assert path == "/var/lib/grafana/dashboards/testbed"
    assert host.file(path).is_directory


def test_every_dashboard_provisioned_unchanged(host):
    expected = sorted(DASHBOARDS.glob("*.json"))
    assert expected
    for source in expected:
        deployed = host.file(f"/var/lib/grafana/dashboards/testbed/{source.name}")
        assert deployed.sha256sum == hashlib.sha256(source.read_bytes()).hexdigest()
        dashboard = json.loads(deployed.content_string)
        uids = {panel["datasource"]["uid"] for panel in dashboard["panels"]}
        assert uids == {"testbed-prometheus"}
