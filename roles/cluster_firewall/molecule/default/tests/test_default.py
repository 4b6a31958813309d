"""The firewall chain: closed by default. Loopback, established connections, and the cluster network (and one
extra source) to the testbed's ports accepted, SSH from the admin network, every other packet rejected (TCP
with a reset, UDP with port-unreachable); applied by an enabled unit (so again at boot), removed when it
stops. That this holds against a real scan: tests/e2e/test_local_cluster.py (nmap from outside)."""

import pytest

CHAIN = "TESTBED"
PORTS = "9410,31337,9100,9090,3000,29500,5201,5202,5203,29510,32768:60999"


@pytest.fixture(scope="module")
def rules(host):
    return host.check_output(f"iptables -S {CHAIN}").splitlines()[1:]  # [0] is "-N TESTBED"


def test_input_jumps_to_the_chain_first(host):
    # after the chain that only counts (next test)
    assert host.check_output("iptables -S INPUT").splitlines()[1:3] == [
        "-A INPUT -j TESTBED_RX",
        f"-A INPUT -j {CHAIN}",
    ]


def test_the_hivemind_traffic_is_counted_per_direction(host):
    """The chains the trainer reads its per-round bytes from (trainer/traffic.py): they only count."""
    assert host.check_output("iptables -S OUTPUT").splitlines()[1] == "-A OUTPUT -j TESTBED_TX"
    for counted in ("TESTBED_TX", "TESTBED_RX"):
        rules = host.check_output(f"iptables -S {counted}").splitlines()[1:]
        assert rules == [f"-A {counted} -p tcp -m multiport --ports 31337"], rules


def test_accepted_then_everything_else_rejected(rules):
    assert rules == [
        f"-A {CHAIN} -i lo -j ACCEPT",
        f"-A {CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f"-A {CHAIN} -s 10.42.0.0/24 -p icmp -j ACCEPT",
        f"-A {CHAIN} -s 10.42.0.0/24 -p tcp -m multiport --dports {PORTS} -j ACCEPT",
        f"-A {CHAIN} -s 192.0.2.7/32 -p icmp -j ACCEPT",
        f"-A {CHAIN} -s 192.0.2.7/32 -p tcp -m multiport --dports {PORTS} -j ACCEPT",
        f"-A {CHAIN} -s 198.51.100.0/24 -p tcp -m tcp --dport 22 -j ACCEPT",
        f"-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {CHAIN} -p udp -j REJECT --reject-with icmp-port-unreachable",
        f"-A {CHAIN} -j REJECT --reject-with icmp-admin-prohibited",
    ]


def test_ipv6_closed_but_for_loopback_established_and_icmpv6(host):
    assert host.check_output("ip6tables -S INPUT").splitlines()[1] == f"-A INPUT -j {CHAIN}"
    assert host.check_output(f"ip6tables -S {CHAIN}").splitlines()[1:] == [
        f"-A {CHAIN} -i lo -j ACCEPT",
        f"-A {CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f"-A {CHAIN} -p ipv6-icmp -j ACCEPT",
        f"-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {CHAIN} -p udp -j REJECT --reject-with icmp6-port-unreachable",
        f"-A {CHAIN} -j REJECT --reject-with icmp6-adm-prohibited",
    ]


def test_unit_enabled_and_stop_removes_the_chain(host):
    unit = host.service("testbed-firewall.service")
    assert unit.is_enabled
    host.check_output("systemctl stop testbed-firewall.service")
    try:
        assert CHAIN not in host.check_output("iptables -S") + host.check_output("ip6tables -S")  # TX, RX too
    finally:
        host.check_output("systemctl start testbed-firewall.service")
    assert f"-A INPUT -j {CHAIN}" in host.check_output("iptables -S INPUT")


def test_unneeded_units_masked(host):
    assert host.check_output("systemctl is-enabled testbed-unneeded.socket || true") == "masked"
    assert not host.socket("tcp://0.0.0.0:1111").is_listening
