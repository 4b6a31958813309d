"""experiment.yml end to end on the local cluster: real containers, real Hivemind peers, real Ceph."""

from __future__ import annotations

import contextlib
import csv
import json
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from e2e_support import (
    PlaybookRun,
    extra_vars,
    free_port,
    icmp_unlimited,
    interrupt_playbook,
    outside_namespace,
    port_scan,
    read_json,
    run_playbook,
)
from shared_cluster import ISOLATED_CLUSTER, REPO, environment

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.usefixtures("local_cluster")]

# Small, fast settings: a handful of Hivemind epochs in about a minute of training on 2 cores. An epoch is
# 8 (4 peers) to 16 (2 peers) steps per peer: with fewer, Hivemind's progress estimate (extrapolated from the
# peers' last reports) can call an epoch before the others got there, and that peer's round finds nobody.
FAST = {
    "model": "smallcnn",
    "batch_size": 16,
    "max_steps": 60,
    "target_batch_size": 512,
    "matchmaking_time": 2,
    "averaging_timeout": 20,
    "finish_grace": 10,
    "start_timeout": 240,
    "progress_interval": 10,
    "run_timeout": 900,
}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _check_complete(results: Path, runs: list[str], strategy: str) -> dict:
    experiment = read_json(results / "experiment.json")
    assert experiment["complete"] is True, experiment["incomplete_reason"]
    assert experiment["incomplete_reason"] is None
    assert experiment["strategy"] == strategy
    for run in runs:
        summary = read_json(results / run / "summary.json")
        assert summary["complete"] is True, (run, summary)
        assert summary["strategy"] == strategy
        assert summary["steps"] > 0
        for name in ("config.json", "steps.csv", "trainer.log"):
            assert (results / run / name).is_file(), (run, name)
        log = (results / run / "trainer.log").read_text()
        # the runner's last line is there whatever the run's length (a loop progress line only every 50 steps)
        assert "trainer.runner: run ended:" in log, f"{run}: trainer.log lacks the trainer's log"
    return experiment


def _check_averaging(results: Path, peers: list[str], chance) -> None:
    """Every peer averaged and every failed round has its cause (the testbed's part); whether a peer's last
    round succeeded is Hivemind's chance on this host, recorded (the finish rule, docs/architecture.md).

    A failed last round found nobody, timed out or lost a groupmate that had shut down. A ``partial`` last
    round (Hivemind's intermittent empty reply stream, seen mid-run too: docs/hivemind-behaviour.md) is
    expected only where a peer shut down before every other peer was done, so it counts as a clean finish
    when every peer's summary shows all the others done before its shutdown.
    """
    everyone_waited = all(
        details["peers_done"] >= details["peers_expected"]
        for details in (read_json(results / peer / "summary.json")["strategy_details"] for peer in peers)
    )
    for peer in peers:
        rounds = _rows(results / peer / "rounds.csv")
        assert any(row["outcome"] == "ok" for row in rounds), (peer, rounds)
        assert all(row["cause"] for row in rounds if row["outcome"] != "ok"), (peer, rounds)
        last = rounds[-1]
        clean = last["outcome"] == "ok" or (last["cause"] == "partial" and everyone_waited)
        chance.expect(clean, f"{peer}'s last round ended cleanly", last)


def _prometheus(port: int, query: str, at: float) -> dict[str, float]:
    """An instant PromQL query against the monitor's published Prometheus: {peer label: value}."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": at})
    with urllib.request.urlopen(url, timeout=10) as response:
        result = json.loads(response.read())["data"]["result"]
    return {series["metric"].get("peer", ""): float(series["value"][1]) for series in result}


def _in(host: str, *command: str, detach: bool = False, check: bool = False) -> subprocess.CompletedProcess:
    """``command`` in the tests' container of ``host`` (``detach``: started in the background)."""
    prefix = ISOLATED_CLUSTER["testbed_container_prefix"]
    return subprocess.run(
        ["podman", "exec", *(["-d"] if detach else []), f"{prefix}{host}", *command],
        env=environment(), capture_output=True, text=True, timeout=60, check=check,
    )  # fmt: skip


def _inventory_with(tmp_path: Path, host_vars: dict[str, dict]) -> list[str]:
    """-i arguments: the local inventory plus a file of per-host variables (heterogeneous peers)."""
    extra = tmp_path / "hosts-extra.yml"
    extra.write_text(json.dumps({"all": {"hosts": host_vars}}))
    return ["-i", str(REPO / "inventories" / "local"), "-i", str(extra)]


# the testbed's ports, from their one list (the local inventory's testbed_ports)
TESTBED_PORTS = yaml.safe_load(
    (REPO / "inventories" / "local" / "group_vars" / "all" / "cluster.yml").read_text()
)["testbed_ports"]


@contextlib.contextmanager
def _port_held(host: str, port: int) -> Iterator[None]:
    """``port`` on ``host`` held by a program of no run's (a Python listener) while the block runs: started
    at once, and again in a container the playbook creates anew (long before any trainer or probe starts)."""
    tag = f"e2e holder of {port}"
    holder = f"import socket, time; s = socket.create_server(('', {port})); time.sleep(900)  # {tag}"
    done = threading.Event()

    def hold() -> None:
        while True:
            if _in(host, "pgrep", "-f", tag).returncode == 1:
                _in(host, "python3", "-c", holder, detach=True)
            if done.wait(0.5):
                return

    holding = threading.Thread(target=hold, daemon=True)
    holding.start()
    try:
        yield
    finally:
        done.set()
        holding.join()
        _in(host, "pkill", "-f", tag)


def _netprobe(sender: str, receiver: str, address: str) -> float:
    """Bytes/s of one TCP stream between two of the tests' containers, measured now (trainer netprobe, on its
    port: the only one the firewall opens for it)."""
    prefix = ISOLATED_CLUSTER["testbed_container_prefix"]
    serve = subprocess.Popen(
        ["podman", "exec", f"{prefix}{receiver}", "trainer", "netprobe", "serve", "--bind", address,
         "--port", "5201", "--timeout", "30"],
        env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(20):
            sent = subprocess.run(
                ["podman", "exec", f"{prefix}{sender}", "trainer", "netprobe", "send", "--to", address,
                 "--port", "5201", "--seconds", "2"],
                env=environment(), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if sent.returncode == 0:
                return float(json.loads(sent.stdout)["bytes_per_second"])
            time.sleep(0.5)  # the receiver is still starting
        raise AssertionError(f"netprobe {sender} -> {receiver} failed: {sent.stderr[-2000:]}")
    finally:
        serve.kill()
        serve.wait()


# The two-peer runs on synthetic data run before the four peers read CephFS: a run that mounts no CephFS
# stops the warm cluster's storage host, and the next one that mounts it waits for its restart (its metadata
# server waits out ceph_test_mds_reconnect_timeout for the peers' earlier clients).
def test_a_peer_that_never_arrives_makes_the_run_incomplete(tmp_path):
    # peer-02's Hivemind port is held by another program: its trainer cannot listen and never reaches the
    # start barrier, where the bootstrap peer gives up after start_timeout: 10 s, which peer-01 waits out
    # (every peer starts at once and peer-02's fails as it starts: a short barrier keeps nobody out)
    settings = {**FAST, "peers": 2, "dataset": "synthetic", "monitoring": False, "start_timeout": 10}
    settings.update(cpu_probe_seconds=0, measure_bandwidth=False)  # neither is looked at here
    settings["experiment_id"] = "e2e-incomplete"
    with _port_held("peer-02", TESTBED_PORTS["hivemind"]):
        run = run_playbook("experiment.yml", *extra_vars(results_root=str(tmp_path), **settings))
    assert run.returncode != 0
    assert "Experiment e2e-incomplete is INCOMPLETE" in run.output
    experiment = read_json(tmp_path / "e2e-incomplete" / "experiment.json")
    assert experiment["complete"] is False
    assert "peer-01" in experiment["incomplete_reason"]
    assert "start_timeout" in experiment["incomplete_reason"], experiment["incomplete_reason"]
    summary = read_json(tmp_path / "e2e-incomplete" / "peer-01" / "summary.json")
    assert summary["exit_reason"] == "start_timeout"
    assert summary["complete"] is False


def test_a_run_interrupted_in_its_probe_then_in_its_training_leaves_nothing_behind(tmp_path, chance):
    """Ctrl-C during the bandwidth probe, the same command again at once, Ctrl-C during its
    training, and again (with FAST's 60 steps instead of 2000): each run ends what the interrupted one left
    (the probe's server, the trainers) and says so, and the last completes. Then the same complete run into a
    new results_root: fetched, not run again."""
    settings = {**FAST, "peers": 2, "dataset": "synthetic", "monitoring": False, "cpu_probe_seconds": 0}
    # an id of this attempt's: a rerun of the test must not find the first attempt's complete run on the hosts
    experiment_id = f"e2e-interrupted-{time.strftime('%H%M%S')}"
    # still training when the next run ends what it left (200 steps once ended in 20 s, before it got there)
    settings.update(max_steps=2000, experiment_id=experiment_id)
    arguments = extra_vars(results_root=str(tmp_path / "results"), **settings)
    # the run that completes needs no more steps than FAST's: it ends the interrupted run's trainers first
    shorter = settings | {"max_steps": FAST["max_steps"]}
    completing = extra_vars(results_root=str(tmp_path / "results"), **shorter)
    # a cache of its own: the bandwidth probe is measured, not reused from an earlier test's
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}

    # first, the probe's port on the first peer held by a program of no run's: the run stops before any
    # trainer starts, in one message that names the host, the port and the program, and its record says so
    port, held_id = TESTBED_PORTS["netprobe"], f"{experiment_id}-held"
    held_settings = extra_vars(
        results_root=str(tmp_path / "results"), **(shorter | {"experiment_id": held_id})
    )
    with _port_held("peer-01", port):
        held = run_playbook("experiment.yml", *held_settings, env=env)
    assert held.returncode != 0
    cause = f'port {port} on peer-01, the bandwidth probe\'s, is held by another program (users:(("python3",'
    where = "peer-01 in 'Measure the bandwidth between two peers / Stop when another program holds it'"
    assert f"the run failed on {where}: {cause}" in " ".join(held.output.split()), held.output[-6000:]
    record = read_json(tmp_path / "results" / held_id / "experiment.json")
    assert record["complete"] is False and set(record["failed"]) == {"peer-01"}, record
    assert cause in record["incomplete_reason"], record["incomplete_reason"]
    assert "Run the peers or the baseline" not in held.output  # stopped before any trainer started

    in_probe = interrupt_playbook(
        "experiment.yml", *arguments, at="TASK [Stream from the last peer to the first", env=env
    )
    assert in_probe.returncode != 0
    in_training = interrupt_playbook(
        "experiment.yml", *arguments, at="TASK [trainer_service : Wait up to one progress interval", env=env
    )
    assert "Address already in use" not in in_training.output, in_training.output[-4000:]
    chance.expect(
        "peer-01: ended what an earlier run left: trainer netprobe" in in_training.output,
        "the probe's server outlived the interrupted run and the next run ended it",
        in_training.output[-3000:],
    )
    done = run_playbook("experiment.yml", *completing, env=env)
    assert done.returncode == 0, done.output[-8000:]
    for peer in ("peer-01", "peer-02"):
        assert f"{peer}: ended what an earlier run left: testbed-trainer.service" in done.output, peer
    assert read_json(tmp_path / "results" / experiment_id / "experiment.json")["complete"] is True

    # complete on the hosts, absent from a new results_root: fetched there, not run again
    elsewhere_root = json.dumps({"results_root": str(tmp_path / "elsewhere")})
    elsewhere = run_playbook("experiment.yml", *completing, "-e", elsewhere_root, env=env)
    assert elsewhere.returncode == 0, elsewhere.output[-8000:]
    assert "is complete on every peer; not running it again" in elsewhere.output
    copied = tmp_path / "elsewhere" / experiment_id
    assert read_json(copied / "experiment.json")["complete"] is True
    assert read_json(copied / "peer-02" / "summary.json")["complete"] is True


# ------------------------------------------------------------------ one run shared by the tests below
# Four Hivemind peers reading Fashion-MNIST from CephFS, with monitoring and a DHT-only bootstrap node; the
# last peer is a slower volunteer (half the vCPUs, half the bandwidth), per host from the inventory.
PEERS = ["peer-01", "peer-02", "peer-03", "peer-04"]
FAST_PEER = {"vcpus": 4, "bandwidth_mbit": 100}
# the slow peer's link also delays what it receives, with jitter (no netem here: the user-space delay)
SLOW_PEER = {"vcpus": 2, "bandwidth_mbit": 50, "latency_ms": 10, "jitter_ms": 1}


@dataclass
class SharedRun:
    root: Path  # results_root
    results: Path  # results_root/<experiment_id>
    run: PlaybookRun
    arguments: list[str]  # -i ... -e ...: the same command again
    prometheus_port: int
    secret: str


@pytest.fixture(scope="module")
def four_peers(tmp_path_factory, local_cluster) -> SharedRun:
    """The run; a failed playbook fails this fixture, so that a rerun starts a new run."""
    root = tmp_path_factory.mktemp("four-peers")
    prometheus_port = free_port()
    # A secret given by the environment appears in no Ansible output and in no file of the results
    secret = f"e2e-secret-{time.time_ns()}"
    inventory = _inventory_with(root, {**dict.fromkeys(PEERS[:3], FAST_PEER), PEERS[3]: SLOW_PEER})
    settings = {
        **FAST,
        "peers": 4,
        "dataset": "fashion-mnist",
        "dataset_storage": "cephfs",
        "monitoring": True,
        "experiment_id": "e2e-four",
        "testbed_monitor_publish": [f"127.0.0.1:{prometheus_port}:9090", f"127.0.0.1:{free_port()}:3000"],
        "dht_bootstrap": "monitor",
        # 60 Mbit/s of cross traffic on peer-02's 100 Mbit/s uplink, while the peers train
        "cross_traffic": "peer-02>peer-03@2s+10s=60mbit",
    }
    arguments = [*inventory, *extra_vars(results_root=str(root / "results"), **settings)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRAFANA_ADMIN_PASSWORD", secret)
        run = run_playbook("experiment.yml", *arguments)
    assert run.returncode == 0, run.output[-8000:]
    return SharedRun(root / "results", root / "results" / "e2e-four", run, arguments, prometheus_port, secret)


def test_four_peers_one_slower_from_cephfs_with_monitoring(four_peers, chance):
    run, results, port = four_peers.run, four_peers.results, four_peers.prometheus_port
    experiment = _check_complete(results, PEERS, "hivemind")
    assert set(experiment["hosts"]) == set(PEERS)
    assert experiment["hosts"]["peer-01"]["kernel"]
    secret = four_peers.secret
    assert secret not in run.output
    leaked = [p for p in four_peers.root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert (
        secret in _in("monitor", "cat", "/etc/grafana/grafana.ini", check=True).stdout
    )  # it did reach Grafana (and only it)
    # The node image's Python keeps what Ansible's modules compile (images/node/): in a directory
    # of root's alone, with entries written since the container started (this cluster's own modules)
    cache = "/var/cache/testbed/zipimport"
    since_start = f"find {cache} -type f -newer /run/.containerenv | wc -l"
    kept = _in("peer-01", "sh", "-c", f"stat -c '%a %U' {cache}; {since_start}", check=True).stdout.split()
    assert kept[:2] == ["700", "root"] and int(kept[2]) > 0, kept
    # Every peer read Fashion-MNIST through its ceph-fuse mount, and its data loading is timed
    storage = experiment["storage"]
    assert storage["backend"] == "cephfs"
    assert storage["source"].startswith("cephfs://client.testbed-ro@10.89.66.5/testfs/"), storage
    assert storage["fstype"] == "fuse.ceph-fuse" and storage["mount_options"].startswith("ro,"), storage
    assert experiment["settings"]["data_root"] == "/mnt/datasets/fashion-mnist"
    for peer in PEERS:
        data_seconds = [float(row["data_seconds"]) for row in _rows(results / peer / "steps.csv")]
        assert data_seconds and all(s >= 0 for s in data_seconds) and sum(data_seconds) > 0, peer
    assert f"Prometheus: http://127.0.0.1:{port}" in run.output
    assert "peer-01" in run.output and "samples/s" in run.output  # the printed summary table

    # Prometheus (still up after the run) scraped every peer's exporter while that peer ran, with
    # its steps, and its node exporter all along; dashboards and datasource are provisioned on the monitor.
    # Over each peer's run, not at one instant: a short run sees only a few 5 s scrapes.
    for peer in PEERS:
        steps = _rows(results / peer / "steps.csv")
        first, last = float(steps[0]["timestamp"]), float(steps[-1]["timestamp"])
        span, at = f"[{int(last - first) + 60}s]", last + 30
        up = _prometheus(port, f'max_over_time(up{{job="trainer",peer="{peer}"}}{span})', at)
        assert up == {peer: 1.0}, (peer, up)
        scraped = _prometheus(port, f'max_over_time(trainer_steps_total{{peer="{peer}"}}{span})', at)
        assert scraped and 0 < scraped[peer] <= len(steps), (peer, scraped)
        # the node exporter answered all along: at most one scrape missed, which on the slower peer's small
        # CPU share can be a scrape past its 4 s timeout while the trainer uses the share (seen once in a CI
        # run); an exporter that is down misses every scrape
        node = f'up{{job="node",host="{peer}"}}{span}'
        scrapes = _prometheus(port, f"count_over_time({node})", at)
        missed = _prometheus(port, f"count_over_time({node}) - sum_over_time({node})", at)
        assert list(scrapes.values()) and list(scrapes.values())[0] >= 3, (peer, scrapes)
        assert list(missed.values()) and list(missed.values())[0] <= 1, (peer, missed, scrapes)
    dashboards = _in("monitor", "ls", "/var/lib/grafana/dashboards/testbed", check=True).stdout.split()
    assert {"experiment.json", "hosts.json"} <= set(dashboards), dashboards
    assert (
        "prometheus"
        in _in(
            "monitor", "cat", "/etc/grafana/provisioning/datasources/testbed.yml", check=True
        ).stdout.lower()
    )
    # The start barrier lines up every peer's first step.
    first_steps = [float(_rows(results / peer / "steps.csv")[0]["timestamp"]) for peer in PEERS]
    assert max(first_steps) - min(first_steps) < 15, first_steps
    # Every peer averaged; whether a peer ended in a round the others left is recorded
    _check_averaging(results, PEERS, chance)
    # Each ok round's Hivemind bytes, counted by the firewall's chains apart from other traffic (the
    # exporters, Ceph, Prometheus' scrapes), and its rate; Prometheus has the same bytes per peer
    for peer in PEERS:
        details = read_json(results / peer / "summary.json")["strategy_details"]
        assert details["traffic_counted"] is True, peer
        ok = [row for row in _rows(results / peer / "rounds.csv") if row["outcome"] == "ok"]
        assert all(int(row["sent_bytes"]) > 0 and int(row["received_bytes"]) > 0 for row in ok), (peer, ok)
        # the run's total, read at the barrier and at the end, holds every round's bytes
        assert details["traffic"]["sent_bytes"] >= max(int(row["sent_bytes"]) for row in ok), (peer, details)
        assert all(float(row["sent_mbit_per_second"]) > 0 for row in ok), (peer, ok)
        steps = _rows(results / peer / "steps.csv")
        span, at = f"[{int(float(steps[-1]['timestamp']) - float(steps[0]['timestamp'])) + 60}s]", time.time()
        query = f'max_over_time(trainer_averaging_bytes_total{{peer="{peer}",direction="sent"}}{span})'
        exported = _prometheus(port, query, min(at, float(steps[-1]["timestamp"]) + 30))
        chance.expect(exported.get(peer, 0) > 0, f"Prometheus scraped {peer}'s averaging bytes", exported)

    # Peer-02's agent sent iperf3's flow to peer-03's (served by peer-03's agent)
    # for the window, through the firewall's cross-traffic port; what the flow achieved is recorded, and
    # whether peer-02's rounds inside the window got less of the link than those outside (a measurement)
    (window,) = [fault for fault in experiment["faults"] if fault["kind"] == "cross"]
    assert (window["host"], window["target"], window["status"]) == ("peer-02", "peer-03", "healed"), window
    assert 10 < window["achieved_mbit"] <= 66 and window["sent_bytes"] > 0, window
    rates: dict[bool, list[float]] = {True: [], False: []}
    for r in _rows(results / "peer-02" / "rounds.csv"):
        if r["outcome"] == "ok" and r["sent_mbit_per_second"]:
            within = window["applied_at"] <= float(r["timestamp"]) <= window["healed_at"]
            rates[within].append(float(r["sent_mbit_per_second"]))
    inside, outside = rates[True], rates[False]
    chance.expect(
        inside and outside and statistics.median(inside) < statistics.median(outside),
        "peer-02's rounds inside the cross-traffic window got a lower link rate",
        (inside, outside),
    )
    # ... and the experiment dashboard's "Egress beside Hivemind's" shows it, queried from the run's
    # Prometheus as Grafana would (5 s scrapes: a 10 s rate), over the window: peer-02 sent the flow, peer-04
    # nothing like it
    dashboard = json.loads((REPO / "dashboards" / "experiment.json").read_text())
    (expr,) = [
        t["expr"]
        for p in dashboard["panels"]
        if p["title"] == "Egress beside Hivemind's"
        for t in p["targets"]
    ]
    query = expr.replace("$run_id", "e2e-four").replace("$peer", ".+").replace("$__rate_interval", "10s")
    span = f"[{int(window['healed_at'] - window['applied_at'])}s:1s]"
    egress = _prometheus(port, f"max_over_time(({query}){span})", window["healed_at"])
    assert egress.get("peer-02", 0) > 20, egress
    chance.expect(
        egress.get("peer-04", 0) < 20, "no other host's egress beside Hivemind's in the window", egress
    )

    # Every peer's results name its own settings (vCPUs, quota, threads, link)
    hosts = experiment["hosts"]
    fast, slow = hosts["peer-01"], hosts["peer-04"]
    assert [hosts[peer]["vcpus"] for peer in PEERS] == [4, 4, 4, 2]
    assert fast["cpus_limit"] == pytest.approx(2 * slow["cpus_limit"], rel=0.01)
    # Fair CPU: the peers, with Ceph, Prometheus and the controller running beside them, get their
    # quota under equal full load (the CPU probe, all at once before the run). What the testbed guarantees is
    # asserted: the quotas are set in proportion to the vCPUs, no peer gets more than its quota, and the
    # playbook warns exactly when equal peers were served more than 10 % apart. How close to its quota and to
    # the others a 2-core host with Ceph beside them serves each peer in a 5 s window is the host's scheduling
    # (CI saw 12 %, then 31 %: one peer at 68 % of its quota): recorded. What they used over the run is
    # recorded beside it; it also reflects unequal averaging waits.
    fast_cores, slow_cores = fast["cpu_probe"]["cores_used"], slow["cpu_probe"]["cores_used"]
    chance.expect(fast_cores == pytest.approx(2 * slow_cores, rel=0.1), "a 4-vCPU peer got 2x a 2-vCPU one")
    fairness = experiment["cpu_fairness"]
    equal = fairness["groups"]["4"]
    assert set(equal["probe_cores"]) == set(equal["cores_used"]) == set(PEERS[:3]), equal
    assert set(fairness["groups"]["2"]["probe_cores"]) == {"peer-04"}, fairness
    served_apart = equal["probe_spread"] > 0.10
    unequal = [w for w in fairness["warnings"] if w.startswith("peers declared with 4 vCPUs were served")]
    assert len(unequal) == served_apart, fairness
    assert ("WARNING: peers declared with 4 vCPUs were served unequally" in run.output) == served_apart
    chance.expect(not served_apart, "equal peers got their CPU within 10 %", equal["probe_cores"])
    # ... and whether equal peers ran at equal speed is recorded and printed (a measurement, not asserted)
    speed = experiment["speed_fairness"]["groups"]["4"]
    rates = {peer: read_json(results / peer / "summary.json")["samples_per_second"] for peer in PEERS[:3]}
    assert speed["samples_per_second"] == pytest.approx(rates, abs=1e-3), (speed, rates)
    fastest, slowest = max(rates.values()), min(rates.values())
    assert speed["spread"] == pytest.approx((fastest - slowest) / fastest, abs=1e-3), speed
    assert "speed of equal peers" in run.output
    for peer in PEERS:
        host = hosts[peer]
        probe, cpu, limit = host["cpu_probe"], host["cpu_received"], host["cpus_limit"]
        assert probe["workers"] == host["threads"] and probe["late_seconds"] < 1, probe
        assert 0 < probe["cores_used"] <= 1.05 * limit, (peer, probe, limit)
        chance.expect(probe["cores_used"] >= 0.85 * limit, f"{peer} got 85 % of its quota", (probe, limit))
        assert cpu["source"] == "cgroup" and cpu["throttled_periods"] <= cpu["periods"] > 0, cpu
        assert cpu["cores_used"] <= limit * 1.05, (peer, cpu)
        # where the peer's CPU went: the training loop's process and Hivemind's DHT, p2pd and averagers
        split = cpu["process_tree_by_role"]
        assert {"trainer", "dht", "p2pd", "state_averager"} <= set(split), (peer, split)
        # the DHT and p2pd work all the time; an averager may have had no round in a short run's window
        assert split["dht"] > 0 and split["p2pd"] > 0, (peer, split)
    assert "CPU by process (all peers, training): " in run.output
    # Every peer's uplink was shaped to its own rate during the run, and the shaping is
    # gone afterwards. The measured link is the last peer's uplink (peer-04 -> peer-01,
    # playbooks/network.yml), within 15 % of its 50 Mbit/s; the same probe now runs far faster.
    for peer in PEERS:
        link, rate = hosts[peer]["link"], hosts[peer]["bandwidth_mbit"]
        assert rate == (SLOW_PEER if peer == "peer-04" else FAST_PEER)["bandwidth_mbit"], (peer, rate)
        assert "tbf" in link["qdisc"] and f"rate {rate:g}Mbit" in link["qdisc"], link
        assert "tbf" not in link["after_run"], link
        delayed = peer == "peer-04"
        assert link["delay_method"] == ("nfqueue" if delayed else "none"), (peer, link)
        assert (link["delay_counts"] is not None) == delayed, (peer, link)
    # what arrived at peer-04 from the cluster waited in its delay (dropping none), and the probe's round
    # trips from peer-04 to peer-01 carried the delay of their way back
    counts = hosts["peer-04"]["link"]["delay_counts"]
    assert counts["packets"] > 100 and counts["dropped"] == 0, counts
    assert "--queue-num 7" in hosts["peer-04"]["link"]["delay_rules"]
    trips, slow = experiment["network"]["round_trip_ms"], hosts["peer-04"]
    assert len(trips) == 10 and min(trips) >= slow["latency_ms"] - 5 * slow["jitter_ms"], trips
    network = experiment["network"]
    assert (network["from"], network["to"]) == ("peer-04", "peer-01"), network
    assert int(network["bytes"]) > 0, network
    shaped = float(network["bandwidth_bytes_per_second"])
    assert shaped == pytest.approx(50e6 / 8, rel=0.15), shaped
    unshaped = _netprobe("peer-04", "peer-01", "10.89.66.101")
    assert unshaped > 3 * shaped, (unshaped, shaped)
    # A DHT-only node on the monitor host started the DHT (dht_bootstrap=monitor), so
    # no peer bootstrapped (none published multiaddrs), every peer joined the node, and the node's record says
    # what it served and the CPU it used (the default, the first peer: test_faults.py)
    bootstrap = experiment["bootstrap"]
    assert (bootstrap["by"], bootstrap["host"]) == ("monitor", "monitor"), bootstrap
    node = bootstrap["dht_node"]
    assert node["served_seconds"] > 0 and node["cpu_seconds"] > 0, node
    assert read_json(results / "dht-monitor" / "dht.json") == node
    node_id = node["multiaddrs"][0].rsplit("/p2p/", 1)[1]
    for peer in PEERS:
        assert not (results / peer / "multiaddrs.txt").exists(), peer
        joined = read_json(results / peer / "config.json")["initial_peers"]
        assert joined == [f"/ip4/10.89.66.10/tcp/31337/p2p/{node_id}"], (peer, joined)


def test_a_second_run_into_complete_results_is_refused(four_peers):
    again = run_playbook("experiment.yml", *four_peers.arguments, timeout=120)
    assert again.returncode != 0
    assert "already holds the complete results of experiment e2e-four" in again.output
    assert "-e force=true" in again.output
    assert read_json(four_peers.results / "experiment.json")["complete"] is True  # what was there is kept


def _connects(address: str, port: int, *, via: list[str]) -> str:
    """'open', 'refused' or 'timeout': one TCP connection attempt from the namespace/container ``via``."""
    probe = (
        "import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
        " print('open')\nexcept ConnectionRefusedError:\n print('refused')\n"
        "except OSError:\n print('timeout')"
    )
    done = subprocess.run([*via, "python3", "-c", probe, address, str(port)], env=environment(),
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    return done.stdout.strip() or done.stderr[-300:]


# A service someone adds without a firewall rule: TCP 8088 and UDP 161 (a port nmap's top 100 scans), on every
# address. The UDP one echoes, so that nmap would call it open.
ADDED_TCP = (
    "import http.server as h; h.HTTPServer(('0.0.0.0', 8088), h.SimpleHTTPRequestHandler).serve_forever()"
)
ADDED_UDP = (
    "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 161))\n"
    "while True:\n data, sender = s.recvfrom(2048); s.sendto(data or b'x', sender)"
)


def test_no_host_is_reachable_from_outside_the_cluster_network(four_peers, tmp_path):
    """An nmap scan from a neighbour outside the cluster network (a namespace routed through this
    host) of every TCP port and the 100 most common UDP ports of every host of the run (peers, monitor,
    storage) finds nothing open, while the trainer's ports listen on a peer and a service without a firewall
    rule listens on a peer and on the storage host; the cluster itself still reaches the testbed's ports."""
    prefix = ISOLATED_CLUSTER["testbed_container_prefix"]
    addresses = {host: f"{ISOLATED_CLUSTER['testbed_network_prefix']}.{n}" for host, n in
                 zip([*PEERS, "monitor", "storage"], [101, 102, 103, 104, 10, 5], strict=True)}  # fmt: skip
    # nothing listens that the run does not need: rpcbind masked everywhere (the dataset is on CephFS)
    for host in addresses:
        assert _in(host, "systemctl", "is-enabled", "rpcbind.socket").stdout.strip() == "masked", host
    # the trainer's exporter and Hivemind's port on peer-02 (the run is over: free), as during a run
    peer = addresses["peer-02"]
    servers = [
        _in("peer-02", "python3", "-m", "http.server", str(port), "--bind", peer, detach=True)
        for port in (9410, 31337)
    ]
    servers += [_in(host, "python3", "-c", code, detach=True) for host in ("peer-02", "storage")
                for code in (ADDED_TCP, ADDED_UDP)]  # fmt: skip
    assert all(server.returncode == 0 for server in servers), [server.stderr for server in servers]
    try:
        time.sleep(1)
        for port in (9410, 31337):  # the cluster reaches the testbed's ports ...
            assert _connects(peer, port, via=["podman", "exec", f"{prefix}peer-01"]) == "open", port
        for host in ("peer-02", "storage"):  # ... the added service answers on the host itself ...
            assert _connects(addresses[host], 8088, via=["podman", "exec", f"{prefix}{host}"]) == "open", host
        network = ISOLATED_CLUSTER["testbed_network_prefix"]
        with outside_namespace(network) as outside, icmp_unlimited([f"{prefix}{host}" for host in addresses]):
            scan = port_scan(outside, list(addresses.values()), tmp_path)
    finally:
        for host in ("peer-02", "storage"):
            _in(host, "pkill", "-f", "http.server|socket.SOCK_DGRAM")
    print("port scan from outside the cluster network:", json.dumps(scan, indent=1))
    assert set(scan) == set(addresses.values()), scan
    for address, ports in scan.items():
        # ... and from outside every port is closed: a TCP reset or an ICMP port-unreachable came back, so the
        # neighbour does reach the host and is refused (nothing open, nothing merely silent)
        assert set(ports.values()) == {"closed"}, (address, ports)
        assert ports["65535 more/tcp"] == "closed", (address, ports)
        udp = sum(int(port.split()[0]) if " more/" in port else 1 for port in ports if port.endswith("/udp"))
        assert udp == 100, (address, ports)
