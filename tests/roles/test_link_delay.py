"""Role link_shaping's user-space delay (roles/link_shaping/files/testbed_link_delay.py) between two network
namespaces (needs root): it delays what a host receives by at least the set delay, removes its rule when it
ends, and, killed with its rule in place, stops the traffic until ``--remove`` clears the rule, rather than
passing it undelayed. Its fidelity is benchmarks/link_delay_fidelity.py's business, not these tests'."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from shaped_netns import ShapedNamespaces  # noqa: E402

PROGRAM = REPO / "roles" / "link_shaping" / "files" / "testbed_link_delay.py"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _program():
    spec = importlib.util.spec_from_file_location("testbed_link_delay", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstring_examples():
    result = doctest.testmod(_program())
    assert result.attempted > 0 and result.failed == 0


def test_bad_arguments_are_one_line_errors():
    for flags, message in (
        (["--delay-ms", "5"], "--delay-ms, --interface and --source are needed"),
        (["--delay-ms", "-1", "--interface", "eth0", "--source", "10.0.0.0/24"], "must be >= 0"),
    ):
        done = subprocess.run(
            [sys.executable, str(PROGRAM), *flags], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "error:" in done.stderr.strip().splitlines()[-1], done.stderr


def _start(net: ShapedNamespaces, index: int, delay_ms: float) -> subprocess.Popen:
    argv = [sys.executable, str(PROGRAM), "--delay-ms", str(delay_ms), "--interface", "eth0",
            "--source", f"{net.subnet}.0/24"]  # fmt: skip
    process = subprocess.Popen(
        net.command(index, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 20
    while not _has_chain(net, index):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    return process


def _has_chain(net: ShapedNamespaces, index: int) -> bool:
    check = net.command(index, ["iptables", "-w", "-t", "mangle", "-S", "TESTBED_DELAY"])
    return subprocess.run(check, capture_output=True).returncode == 0


def _round_trips(net: ShapedNamespaces, timeout: float = 60) -> list[float]:
    """Ten one-byte round trips from peer 0 to peer 1 (trainer netprobe), ms."""
    probe = [sys.executable, "-m", "trainer", "netprobe"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    serve = [*probe, "serve", "--bind", net.address(1), "--port", "5311", "--timeout", str(timeout)]
    server = subprocess.Popen(net.command(1, serve), stdout=subprocess.PIPE, env=env)
    try:
        sent = subprocess.run(
            net.command(0, [*probe, "send", "--to", net.address(1), "--port", "5311", "--seconds", "0.2"]),
            capture_output=True, text=True, env=env, timeout=timeout, check=True,
        )  # fmt: skip
    finally:
        server.kill()
        server.wait()
    return json.loads(sent.stdout)["round_trip_ms"]


@needs_root
def test_both_directions_are_delayed_and_the_rule_goes_with_the_program():
    with ShapedNamespaces(
        peers=2, prefix=f"ld{os.getpid() % 10000}", subnet=f"10.78.{os.getpid() % 250}"
    ) as net:
        undelayed = _round_trips(net)
        delays = [_start(net, index, 30) for index in range(2)]
        delayed = _round_trips(net)
        for process in delays:
            process.send_signal(signal.SIGTERM)
        said = [process.communicate(timeout=30) for process in delays]
        assert [process.returncode for process in delays] == [0, 0], said
        assert not any(_has_chain(net, index) for index in range(2))
        after = _round_trips(net)
    # each direction waits 30 ms at its receiver: a round trip at least 60 ms more than without
    assert min(delayed) >= 60 > max(undelayed), (undelayed, delayed)
    assert max(after) < 60, after
    counts = dict(item.split("=") for item in said[1][0].strip().splitlines()[-1].split()[1:])
    assert int(counts["packets"]) >= 10 and float(counts["mean_delay_ms"]) >= 30, counts


@needs_root
def test_a_killed_program_stops_the_traffic_until_its_rule_is_removed():
    with ShapedNamespaces(
        peers=2, prefix=f"lk{os.getpid() % 10000}", subnet=f"10.79.{os.getpid() % 250}"
    ) as net:
        delay = _start(net, 1, 5)
        delay.kill()
        delay.wait()
        assert _has_chain(net, 1)
        with pytest.raises((subprocess.CalledProcessError, subprocess.TimeoutExpired)):
            _round_trips(net, timeout=3)
        removed = subprocess.run(net.command(1, [sys.executable, str(PROGRAM), "--remove"]),
                                 capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
        assert "removed chain TESTBED_DELAY" in removed.stdout
        assert not _has_chain(net, 1) and len(_round_trips(net)) == 10
