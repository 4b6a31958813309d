"""The firewall chain: the cluster network and one extra source accepted, the service ports closed to
the rest, applied by an enabled unit (so again at boot), and removed when the unit stops."""

import pytest

CHAIN = "TESTBED"


@pytest.fixture(scope="module")
def rules(host):
    return host.check_output(f"iptables -S {CHAIN}").splitlines()


def test_input_jumps_to_the_chain_first(host):
    assert host.check_output("iptables -S INPUT").splitlines()[1] == f"-A INPUT -j {CHAIN}"


def test_cluster_network_and_extra_source_accepted_before_any_reject(rules):
    accepts = [rules.index(r) for r in rules if r.endswith("-j ACCEPT")]
    rejects = [rules.index(r) for r in rules if "-j REJECT" in r]
    assert f"-A {CHAIN} -s 10.42.0.0/24 -j ACCEPT" in rules
    assert f"-A {CHAIN} -s 192.0.2.7/32 -j ACCEPT" in rules
    assert accepts and rejects and max(accepts) < min(rejects), rules


def test_service_ports_and_gloo_range_rejected_for_everybody_else(rules):
    ports = next(r for r in rules if "multiport" in r)
    assert "--dports 9410,31337,9100,9090,3000,29500" in ports and "tcp-reset" in ports
    assert any("--dport 32768:60999" in r for r in rules)
    assert not any("--dport 22" in r or ",22," in r for r in rules)  # SSH left alone


def test_unit_enabled_and_stop_removes_the_chain(host):
    unit = host.service("testbed-firewall.service")
    assert unit.is_enabled
    host.check_output("systemctl stop testbed-firewall.service")
    try:
        assert CHAIN not in host.check_output("iptables -S")
    finally:
        host.check_output("systemctl start testbed-firewall.service")
    assert f"-A INPUT -j {CHAIN}" in host.check_output("iptables -S INPUT")
