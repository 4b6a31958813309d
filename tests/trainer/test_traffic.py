"""The per-round traffic counts' reader (trainer/traffic.py): the two chains role cluster_firewall
fills, read with iptables; None, said once, where they are not there. The chains' names are the role's."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainer import traffic

REPO = Path(__file__).resolve().parents[2]

LISTING = """Chain {chain} (1 references)
    pkts      bytes target     prot opt in     out     source               destination
    {packets} {count}            tcp  --  *      *       0.0.0.0/0     0.0.0.0/0     multiport ports 31337
"""


def _iptables(tmp_path: Path, counts: dict[str, int] | None) -> str:
    """A stand-in iptables listing the two chains with ``counts`` (None: no such chain, as iptables says)."""
    script = tmp_path / "iptables"
    cases = "".join(
        f'  *{chain}*) printf %s "{LISTING.format(chain=chain, packets=count // 1000, count=count)}" ;;\n'
        for chain, count in (counts or {}).items()
    )
    script.write_text(
        '#!/bin/sh\ncase "$*" in\n' + cases + "  *) echo 'iptables: No chain/target/match by that name.' >&2;"
        " exit 1 ;;\nesac\n"
    )
    script.chmod(0o755)
    return str(script)


def test_a_reading_sums_each_chain_and_the_difference_is_a_rounds_bytes(tmp_path):
    before = traffic.TrafficCounter(_iptables(tmp_path, {"TESTBED_TX": 5000, "TESTBED_RX": 7000})).read()
    after = traffic.TrafficCounter(_iptables(tmp_path, {"TESTBED_TX": 9000, "TESTBED_RX": 8000})).read()
    assert (before.sent, before.received) == (5000, 7000)
    assert after.since(before) == traffic.Traffic(4000, 1000)
    # the firewall restarted in between (its counters from zero): what was counted since
    assert traffic.Traffic(300, 200).since(before) == traffic.Traffic(300, 200)


def test_without_the_chains_every_reading_is_none_and_the_counter_stops_asking(tmp_path, caplog):
    counter = traffic.TrafficCounter(_iptables(tmp_path, None))
    assert counter.available
    with caplog.at_level("INFO"):
        assert counter.read() is None
    assert not counter.available and "no per-round traffic counts" in caplog.text
    assert counter.read() is None
    assert traffic.TrafficCounter(str(tmp_path / "no-such-iptables")).read() is None


def test_the_chains_are_the_ones_the_firewall_fills():
    defaults = yaml.safe_load((REPO / "roles" / "cluster_firewall" / "defaults" / "main.yml").read_text())
    chains = defaults["cluster_firewall_traffic_chains"]
    assert (chains["sent"], chains["received"]) == (traffic.SENT_CHAIN, traffic.RECEIVED_CHAIN)


def test_a_runs_total_is_the_chains_from_its_start_to_its_end(tmp_path):
    """The run's total is read at its start and end, so a round that overlapped another is counted once."""
    counts = {"TESTBED_TX": 5000, "TESTBED_RX": 7000}
    counter = traffic.TrafficCounter(_iptables(tmp_path, counts))
    run = traffic.RunTraffic(counter)
    run.start()
    counter._iptables = _iptables(tmp_path, {"TESTBED_TX": 905000, "TESTBED_RX": 1007000})
    assert run.stop() == {"sent_bytes": 900000, "received_bytes": 1000000}
    # the chains gone (or never there): no total
    missing = traffic.RunTraffic(traffic.TrafficCounter(str(tmp_path / "no-such-iptables")))
    missing.start()
    assert missing.stop() is None
