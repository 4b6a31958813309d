"""Role fault_injection's agent: its network faults applied and healed for real, in a network namespace."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "roles" / "fault_injection" / "files" / "testbed_fault.py"
NAMESPACE = "tfa-test"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def in_namespace(*command: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", NAMESPACE, *command], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def namespace():
    subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "add", NAMESPACE], check=True)
    try:
        in_namespace("ip", "link", "add", "tfa0", "type", "veth", "peer", "name", "tfa1")
        in_namespace("ip", "addr", "add", "10.77.0.1/24", "dev", "tfa0")
        in_namespace("ip", "link", "set", "tfa0", "up")
        in_namespace("ip", "link", "set", "tfa1", "up")
        # the run's link shaping, which a slow fault must put back
        shaping = "tc qdisc replace dev tfa0 root tbf rate 100mbit burst 125000 latency 100ms"
        in_namespace(*shaping.split(" "))
        yield
    finally:
        subprocess.run(["ip", "netns", "del", NAMESPACE], check=False)


def _agent_in_namespace(faults: list, started: Path, timeline: Path, *extra: str, peers: str, timeout: int):
    """The agent, started in the test's namespace against a unit that does not exist (only the network
    faults act)."""
    return subprocess.Popen(
        ["ip", "netns", "exec", NAMESPACE, sys.executable, str(AGENT), "--faults", json.dumps(faults),
         "--started", str(started), "--unit", "no-such-unit.service", "--address", "10.77.0.1",
         "--peers", peers, "--timeline", str(timeline), "--timeout", str(timeout), *extra],
    )  # fmt: skip


def _release_barrier(path: Path) -> None:
    """What the trainer writes when its start barrier releases (experiment/results.py, started.json)."""
    path.write_text(json.dumps({"barrier_released_at": time.time()}))


@needs_root
def test_partition_and_slow_link_are_applied_then_healed(namespace, tmp_path):
    faults = [
        {"spec": "partition:h@0.5s+1.5s", "kind": "partition", "at_seconds": 0.5, "duration_seconds": 1.5},
        {"spec": "slow:h@2.5s+1.5s=20mbit", "kind": "slow", "at_seconds": 2.5, "duration_seconds": 1.5,
         "rate_mbit": 20.0},
    ]  # fmt: skip
    started, timeline = tmp_path / "started.json", tmp_path / "timeline.json"
    agent = _agent_in_namespace(faults, started, timeline, peers="10.77.0.2,10.77.0.3", timeout=30)
    try:
        time.sleep(0.3)
        _release_barrier(started)  # the faults' clock starts
        time.sleep(1.2)
        routes = in_namespace("ip", "route", "show")
        assert "blackhole 10.77.0.2" in routes and "blackhole 10.77.0.3" in routes, routes
        time.sleep(2.0)
        qdisc = in_namespace("tc", "qdisc", "show", "dev", "tfa0", "root")
        assert "rate 20Mbit" in qdisc, qdisc
        assert "blackhole" not in in_namespace("ip", "route", "show")
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
    qdisc = in_namespace("tc", "qdisc", "show", "dev", "tfa0", "root")
    assert "tbf" in qdisc and "rate 100Mbit" in qdisc, qdisc  # the link shaping is back
    recorded = json.loads(timeline.read_text())
    assert [f["status"] for f in recorded["faults"]] == ["healed", "healed"], recorded
    for fault in recorded["faults"]:
        assert abs(fault["applied_seconds"] - fault["at_seconds"]) < 0.5, fault
        assert abs(fault["healed_seconds"] - fault["applied_seconds"] - fault["duration_seconds"]) < 0.5


def test_the_faults_wait_for_this_runs_barrier(tmp_path):
    """An older run's started.json does not start the clock; a trainer whose barrier never releases skips
    every fault."""
    started, timeline = tmp_path / "started.json", tmp_path / "timeline.json"
    _release_barrier(started)  # written before the agent started: an earlier run's
    time.sleep(0.1)
    fault = {"spec": "kill:h@1s", "kind": "kill", "at_seconds": 1.0, "duration_seconds": None}
    done = subprocess.run(
        [sys.executable, str(AGENT), "--faults", json.dumps([fault]), "--started", str(started),
         "--unit", "no-such-unit.service", "--address", "127.0.0.1", "--timeline", str(timeline),
         "--timeout", "1.5"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recorded = json.loads(timeline.read_text())
    assert recorded["started"] is None
    assert recorded["faults"][0]["status"] == "skipped", recorded
    assert "barrier never released" in recorded["faults"][0]["detail"]


@needs_root
def test_stopped_at_the_end_of_the_run_it_heals_the_fault_under_way_and_skips_those_still_due(
    namespace, tmp_path
):
    """Role fault_injection's collect stops the agent when the run is over: a partition under way is healed,
    a fault due later is recorded as skipped (not left planned)."""
    faults = [
        {"spec": "partition:h@0.2s+60s", "kind": "partition", "at_seconds": 0.2, "duration_seconds": 60.0},
        {"spec": "pause:h@90s+5s", "kind": "pause", "at_seconds": 90.0, "duration_seconds": 5.0},
    ]  # fmt: skip
    started, timeline = tmp_path / "started.json", tmp_path / "timeline.json"
    agent = _agent_in_namespace(faults, started, timeline, peers="10.77.0.2", timeout=120)
    try:
        time.sleep(0.3)
        _release_barrier(started)
        deadline = time.monotonic() + 10
        while "blackhole" not in in_namespace("ip", "route", "show") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "blackhole 10.77.0.2" in in_namespace("ip", "route", "show")
        agent.terminate()
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
    assert "blackhole" not in in_namespace("ip", "route", "show")
    recorded = json.loads(timeline.read_text())
    assert [f["status"] for f in recorded["faults"]] == ["healed", "skipped"], recorded
    assert "over before the fault was due" in recorded["faults"][1]["detail"]


def test_a_stop_that_comes_as_the_fault_takes_effect_still_heals_it(tmp_path):
    """SIGTERM between a fault's effect and its record (here: as the partition's route goes in) is held until
    the fault is inside the block that heals it, so the stop heals it instead of leaving it on."""
    spec = importlib.util.spec_from_file_location("testbed_fault", AGENT)
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)

    class Host:
        def __init__(self) -> None:
            self.calls: list[bool] = []

        def ended(self) -> bool:
            return False

        def active(self) -> bool:
            return True

        def partition(self, on: bool) -> None:
            self.calls.append(on)
            if on:  # the collect step stops the agent at this moment
                os.kill(os.getpid(), signal.SIGTERM)

    fault = {"spec": "partition:h@0s+60s", "kind": "partition", "at_seconds": 0.0, "duration_seconds": 60.0}
    started, timeline = tmp_path / "started.json", agent.Timeline(tmp_path / "timeline.json", [fault])
    launched = time.time()
    _release_barrier(started)
    host, previous = Host(), signal.signal(signal.SIGTERM, agent._stop)
    try:
        with pytest.raises(agent.Stopped):
            agent._inject(argparse.Namespace(timeout=10), host, started, timeline, launched)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert host.calls == [True, False]
    assert timeline.document["faults"][0]["status"] == "healed", timeline.document


def _wait_for(timeline: Path, statuses: list[str], seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if timeline.exists():
            recorded = json.loads(timeline.read_text())
            if [f["status"] for f in recorded["faults"]] == statuses:
                return recorded
        time.sleep(0.1)
    raise AssertionError(f"timeline never reached {statuses}: {timeline.read_text()}")


@needs_root
@pytest.mark.skipif(shutil.which("iperf3") is None, reason="needs iperf3 (make apt)")
def test_a_cross_traffic_window_sends_at_its_rate_for_its_duration(namespace, tmp_path):
    """Cross traffic (controller/cross_traffic.py): the source's agent runs an iperf3 flow at the window's
    rate for its duration and records what it achieved; the target's agent serves iperf3 (here the same
    agent, sending to its own address). A window whose target does not answer fails with iperf3's reason."""
    in_namespace("ip", "link", "set", "lo", "up")  # the flow to the namespace's own address
    port = "5299"
    faults = [
        {"spec": "cross:h>h@0.3s+2s=40", "kind": "cross", "at_seconds": 0.3, "duration_seconds": 2.0,
         "rate_mbit": 40.0, "target_address": "10.77.0.1"},
        {"spec": "cross:h>x@3s+1s=40", "kind": "cross", "at_seconds": 3.0, "duration_seconds": 1.0,
         "rate_mbit": 40.0, "target_address": "10.77.0.9"},
    ]  # fmt: skip
    started, timeline = tmp_path / "started.json", tmp_path / "timeline.json"
    agent = _agent_in_namespace(
        faults, started, timeline, "--cross-traffic-port", port, "--serve-cross-traffic", "true",
        peers="", timeout=60,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        _release_barrier(started)
        recorded = _wait_for(timeline, ["healed", "failed"], 30)
        # the target serves for as long as the agent runs, until the run is over
        assert str(port) in in_namespace("ss", "-ltn"), "no iperf3 server"
        agent.terminate()
        assert agent.wait(timeout=15) == 0
    finally:
        agent.kill()
    window, unreachable = recorded["faults"]
    assert 30.0 < window["achieved_mbit"] <= 44.0, window
    assert window["sent_bytes"] > 0.7 * 40e6 / 8 * 2, window
    assert window["healed_seconds"] - window["applied_seconds"] >= 1.9, window
    assert unreachable["status"] == "failed", unreachable
    assert unreachable["detail"].startswith("heal: iperf3: unable to connect"), unreachable
    assert port not in in_namespace("ss", "-ltn"), "the iperf3 server outlived the agent"
