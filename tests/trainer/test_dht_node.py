"""trainer.strategies.hivemind.dht_node: the DHT-only bootstrap node (``trainer dht``) that a run's peers
may join."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from experiment.results import MULTIADDRS_FILE
from trainer.strategies.hivemind import dht_node

DHT_COMMAND = [sys.executable, "-m", "trainer", "dht"]


@pytest.mark.hivemind
@pytest.mark.cluster
@pytest.mark.load_tolerant
def test_a_peer_joins_the_node_and_a_second_peer_reads_what_the_first_stored(tmp_path):
    """The node is a real bootstrap: two DHTs that know only its address find each other's values through it,
    and on stopping it records what it served and used."""
    import hivemind
    from hivemind.utils import get_dht_time

    stop = threading.Event()
    outcome: dict = {}
    server = threading.Thread(
        target=lambda: outcome.update(dht_node.serve("/ip4/127.0.0.1/tcp/0", tmp_path, stop)), daemon=True
    )
    server.start()
    deadline = time.monotonic() + 60
    while not (tmp_path / MULTIADDRS_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    addresses = (tmp_path / MULTIADDRS_FILE).read_text().split()
    assert addresses and all("/p2p/" in address for address in addresses), addresses

    first = hivemind.DHT(start=True, initial_peers=addresses, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    second = hivemind.DHT(start=True, initial_peers=addresses, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    try:
        assert first.store("testbed-key", "from-first", get_dht_time() + 60)
        found = second.get("testbed-key", latest=True)
        assert found is not None and found.value == "from-first"
    finally:
        first.shutdown()
        second.shutdown()
        stop.set()
        server.join(timeout=60)

    record = json.loads((tmp_path / dht_node.RECORD_FILE).read_text())
    assert record == outcome
    assert record["multiaddrs"] == addresses and record["listen"] == "/ip4/127.0.0.1/tcp/0"
    assert record["served_seconds"] > 0 and record["cpu_seconds"] > 0, record


@pytest.mark.hivemind
@pytest.mark.cluster
@pytest.mark.load_tolerant
def test_the_command_serves_until_sigterm_then_writes_its_record(tmp_path):
    """Dilated, as the local cluster runs it: the record says by how much."""
    process = subprocess.Popen(
        [*DHT_COMMAND, "--listen", "/ip4/127.0.0.1/tcp/0", "--results-dir", tmp_path, "--time-dilation", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / MULTIADDRS_FILE).exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read()
            time.sleep(0.2)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "DHT node stopped" in output
    record = json.loads((tmp_path / dht_node.RECORD_FILE).read_text())
    assert record["served_seconds"] > 0 and record["time_dilation"] == 3, record


@pytest.mark.parametrize("factor", ["0.5", "nan"])
def test_a_dilation_below_one_is_one_error_before_anything_starts(tmp_path, factor):
    completed = subprocess.run(
        [*DHT_COMMAND, "--results-dir", tmp_path, "--time-dilation", factor],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr.startswith("trainer: error: dht:") and "time_dilation" in completed.stderr
    assert not list(tmp_path.iterdir())


def test_a_malformed_listen_address_is_one_error_before_anything_starts(tmp_path):
    completed = subprocess.run(
        [*DHT_COMMAND, "--listen", "/ip4/300.1.1.1/tcp/1", "--results-dir", tmp_path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr.startswith("trainer: error: dht:") and "300.1.1.1" in completed.stderr
    assert not list(tmp_path.iterdir())
