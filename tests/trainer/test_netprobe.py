"""trainer.netprobe: the bandwidth probe playbooks/network.yml runs between two peers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest

from trainer import netprobe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_send_reports_what_the_server_received():
    port, received = free_port(), []
    server = threading.Thread(target=lambda: received.append(netprobe.serve("127.0.0.1", port, timeout=20)))
    server.start()
    result = netprobe.send("127.0.0.1", port, seconds=0.3)
    server.join(timeout=20)
    assert received == [result["bytes"]] and result["bytes"] >= netprobe.CHUNK
    assert result["seconds"] >= 0.3
    assert result["bytes_per_second"] == pytest.approx(result["bytes"] / result["seconds"])
    assert len(result["round_trip_ms"]) == 10 and all(0 < ms < 1000 for ms in result["round_trip_ms"])


def test_no_round_trips_when_none_are_asked_for():
    port, received = free_port(), []
    server = threading.Thread(target=lambda: received.append(netprobe.serve("127.0.0.1", port, timeout=20)))
    server.start()
    result = netprobe.send("127.0.0.1", port, seconds=0.1, pings=0)
    server.join(timeout=20)
    assert received == [result["bytes"]] and result["round_trip_ms"] == []


def test_command_line_prints_one_json_line():
    port = free_port()
    probe = [sys.executable, "-m", "trainer", "netprobe"]
    serve = [*probe, "serve", "--bind", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(serve, stdout=subprocess.PIPE)
    sent = subprocess.run(
        [*probe, "send", "--to", "127.0.0.1", "--port", str(port), "--seconds", "0.2"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    served = json.loads(server.communicate(timeout=30)[0])
    assert json.loads(sent.stdout)["bytes"] == served["bytes"] > 0


def test_no_server_is_an_error_after_the_connect_timeout():
    with pytest.raises(OSError):
        netprobe.send("127.0.0.1", free_port(), seconds=0.1, connect_timeout=0.5)


def test_bad_flags_are_one_line_errors():
    for flags, message in (
        (["send", "--to", "127.0.0.1", "--seconds", "0"], "--seconds must be positive"),
        (["send", "--to", "127.0.0.1", "--pings", "256"], "--pings within 0-255"),
        (["send"], "the following arguments are required: --to"),
        (["listen"], "invalid choice: 'listen'"),
    ):
        completed = subprocess.run(
            [sys.executable, "-m", "trainer", "netprobe", *flags], capture_output=True, text=True, timeout=60
        )
        assert completed.returncode == 2, completed
        assert completed.stderr.count("\n") == 1 and message in completed.stderr, completed.stderr
        assert completed.stderr.startswith("trainer: error:"), completed.stderr
