"""The node exporter runs, listens on the container's address only and serves node metrics."""

import pytest

PORT = 9100


@pytest.fixture(scope="module")
def address(host):
    return host.interface.default().addresses[0]


def test_package_installed(host):
    assert host.package("prometheus-node-exporter").is_installed


def test_args_bind_to_cluster_address(host, address):
    args = host.file("/etc/default/prometheus-node-exporter").content_string
    assert f"--web.listen-address={address}:{PORT}" in args


def test_service_running(host):
    service = host.service("prometheus-node-exporter")
    if not service.is_running:
        print(host.run("journalctl -u prometheus-node-exporter --no-pager -n 50").stdout)
    assert service.is_running
    assert service.is_enabled


def test_listens_on_cluster_address_only(host, address):
    assert host.socket(f"tcp://{address}:{PORT}").is_listening
    assert not host.socket(f"tcp://0.0.0.0:{PORT}").is_listening
    assert not host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


def test_metrics_endpoint_answers(host, address):
    body = host.check_output(
        f"python3 -c \"import urllib.request as u; print(u.urlopen('http://{address}:{PORT}/metrics').read().decode())\""
    )
    assert "node_cpu_seconds_total" in body
    assert "node_memory_MemAvailable_bytes" in body


def test_system_directories_unchanged(host):
    for path in ("/etc", "/usr", "/var"):
        directory = host.file(path)
        assert directory.is_directory
        assert (directory.user, directory.group) == ("root", "root")
