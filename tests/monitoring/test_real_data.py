"""Every dashboard panel shows data from a real run.

Debian's Prometheus, configured by the prometheus role's templates (rendered by Ansible for a loopback
inventory), scrapes a real 2-peer Hivemind run of the trainer (smallcnn, synthetic data) and a real node
exporter; then every panel's PromQL, with the template variables substituted as Grafana would, is evaluated
through Prometheus' HTTP API and must return data.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack, closing
from pathlib import Path

import pytest
from monitoring_support import (
    PORTS,
    load_dashboards,
    panel_queries,
    render_prometheus,
    substitute,
    write_inventory,
)

from experiment.results import read_rounds

pytestmark = [
    pytest.mark.slow,
    pytest.mark.hivemind,
    pytest.mark.cluster,
    pytest.mark.load_tolerant,
    pytest.mark.timeout(300),
]

TRAINER = Path(sys.executable).with_name("trainer")
RUN_ID = "monitoring-e2e"
# Peer-02 is paused this long mid-run: peer-01's rounds meanwhile find no group (each gives up after
# at most the averaging timeout, 15 s), so the failed-rounds panel has a failure to show
PAUSE_SECONDS = 20
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval would be for a 1 s scrape interval and a short range
SCRAPE = {
    "prometheus_scrape_interval": "1s",
    "prometheus_scrape_timeout": "1s",
    "prometheus_evaluation_interval": "1s",
}


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def start(stack: ExitStack, args: list[str], log: Path) -> subprocess.Popen:
    """Start a process in its own process group; the stack kills the whole group (p2pd, DHT children)."""
    out = log.open("w")
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        out.close()

    stack.callback(stop)
    return proc


def trainer_args(peer: str, port: int, results: Path) -> list[str]:
    return [
        str(TRAINER), "run", "--strategy", "hivemind", "--model", "smallcnn", "--dataset", "synthetic",
        "--batch-size", "16", "--max-steps", "50", "--target-batch-size", "128", "--matchmaking-time", "2",
        "--averaging-timeout", "15", "--peers", "2", "--start-timeout", "120", "--finish-grace", "5",
        "--vcpus", "1", "--run-id", RUN_ID, "--peer-id", peer, "--results-dir", str(results / peer),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(port), "--listen", "/ip4/127.0.0.1/tcp/0",
    ]  # fmt: skip


def has_data(result: dict) -> bool:
    return any(
        math.isfinite(float(value))
        for series in result["data"]["result"]
        for _t, value in series.get("values", [])
    )


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory):
    """Prometheus, node exporter and a 2-peer Hivemind run on loopback; yields (api, start, end, workdir)."""
    for binary in ("prometheus", "prometheus-node-exporter"):
        if shutil.which(binary) is None:
            pytest.fail(
                f"{binary} not found: apt-get install prometheus prometheus-node-exporter (make setup)"
            )
    assert TRAINER.exists(), f"{TRAINER} missing: pip install -e . into this venv"
    work = tmp_path_factory.mktemp("scraped-run")
    ports = {name: free_port() for name in ("peer-01", "peer-02", "node", "prometheus")}
    peers = {
        peer: {
            "cluster_address": "127.0.0.1",
            "testbed_ports": {**PORTS, "trainer_metrics": ports[peer], "node_exporter": ports["node"]},
        }
        for peer in ("peer-01", "peer-02")
    }
    monitor = {"cluster_address": "127.0.0.1", "testbed_ports": {**PORTS, "node_exporter": ports["node"]}}
    inventory = write_inventory(work / "inventory.yml", peers, monitor)
    config, _rules = render_prometheus(
        work / "etc",
        inventory,
        prometheus_listen_address="127.0.0.1",
        prometheus_port=ports["prometheus"],
        **SCRAPE,
    )
    api = f"http://127.0.0.1:{ports['prometheus']}/api/v1"
    with ExitStack() as stack:
        start(
            stack,
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ports['node']}"],
            work / "node-exporter.log",
        )
        start(
            stack,
            [
                "prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--storage.tsdb.retention.time=1h",
            ],
            work / "prometheus.log",
        )  # fmt: skip
        wait_until(lambda: get_json(f"{api}/status/runtimeinfo"), 30, "Prometheus to answer")

        begin = time.time()
        first = start(stack, trainer_args("peer-01", ports["peer-01"], work), work / "peer-01.log")
        multiaddrs = work / "peer-01" / "multiaddrs.txt"
        wait_until(lambda: multiaddrs.exists() and multiaddrs.read_text().split(), 90, "peer-01's multiaddrs")
        second = start(
            stack,
            [
                *trainer_args("peer-02", ports["peer-02"], work),
                "--initial-peers",
                multiaddrs.read_text().split()[0],
            ],
            work / "peer-02.log",
        )

        def trainer_targets_healthy():
            targets = get_json(f"{api}/targets")["data"]["activeTargets"]
            trainer = {t["labels"]["peer"]: t["health"] for t in targets if t["labels"]["job"] == "trainer"}
            return trainer == {"peer-01": "up", "peer-02": "up"}

        # during the run every peer's target is healthy
        wait_until(trainer_targets_healthy, 90, "both trainer targets up")
        # a few epochs together (ok rounds), then peer-02 paused: peer-01's next rounds find no group
        steps = work / "peer-02" / "steps.csv"
        wait_until(lambda: steps.exists() and len(steps.read_text().splitlines()) > 12, 90, "peer-02's steps")
        os.killpg(second.pid, signal.SIGSTOP)
        try:
            time.sleep(PAUSE_SECONDS)
        finally:
            os.killpg(second.pid, signal.SIGCONT)
        for peer, proc in (("peer-01", first), ("peer-02", second)):
            try:
                returncode = proc.wait(150)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{peer} did not finish; log:\n{(work / f'{peer}.log').read_text()[-3000:]}")
            assert returncode == 0, (
                f"{peer} exited {returncode}:\n{(work / f'{peer}.log').read_text()[-3000:]}"
            )
        time.sleep(2)  # a last scrape and rule evaluation after the final steps
        yield api, begin, time.time(), work


def test_every_panel_has_data(scraped_run):
    api, begin, end, _work = scraped_run
    run_ids = get_json(f"{api}/label/run_id/values?match[]=trainer_run_info")["data"]
    assert RUN_ID in run_ids
    variables = {"run_id": RUN_ID, "peer": ".+", "host": ".+", "__rate_interval": RATE_INTERVAL}
    empty = []
    checked = 0
    for name, dashboard in load_dashboards().items():
        for title, expr in panel_queries(dashboard):
            query = substitute(expr, variables)
            params = urllib.parse.urlencode({"query": query, "start": begin, "end": end, "step": "1"})
            result = get_json(f"{api}/query_range?{params}")
            assert result["status"] == "success", (title, query, result)
            checked += 1
            if not has_data(result):
                empty.append(f"{name} / {title}: {query}")
    assert checked >= 20
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_peer_label_comes_from_the_trainer_and_inventory_agrees(scraped_run):
    api, _begin, end, work = scraped_run
    # the peers have exited (their series are stale now): look back over the run
    query = f'max_over_time(trainer_steps_total{{run_id="{RUN_ID}"}}[5m])'
    params = urllib.parse.urlencode({"query": query, "time": end})
    series = get_json(f"{api}/query?{params}")["data"]["result"]
    labels = sorted((s["metric"]["peer"], s["metric"]["host"], s["metric"]["strategy"]) for s in series)
    assert labels == [("peer-01", "peer-01", "hivemind"), ("peer-02", "peer-02", "hivemind")]
    # Prometheus saw the steps the trainer recorded, up to its last scrape before the peer exited
    for s in series:
        recorded = json.loads((work / s["metric"]["peer"] / "summary.json").read_text())["steps"]
        assert 0 < float(s["value"][1]) <= recorded


def test_rules_evaluate_cleanly(scraped_run):
    api, _begin, _end, _work = scraped_run
    groups = get_json(f"{api}/rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) >= 9
    assert [r["name"] for r in rules if r["health"] != "ok"] == []


def test_a_failed_round_shows_on_the_round_health_panel_with_its_cause(scraped_run):
    """While peer-02 was paused, peer-01's rounds failed; the dashboard shows them while the run
    goes on, with the causes rounds.csv gives them."""
    api, begin, end, work = scraped_run
    experiment = load_dashboards()["experiment.json"]
    (panel,) = [p for p in experiment["panels"] if p["title"] == "Failed rounds by cause"]
    by_cause = panel["targets"][0]["expr"]
    variables = {"run_id": RUN_ID, "peer": ".+", "__rate_interval": RATE_INTERVAL}
    params = {"query": substitute(by_cause, variables), "start": begin, "end": end, "step": "1"}
    result = get_json(f"{api}/query_range?{urllib.parse.urlencode(params)}")
    shown = {series["metric"]["cause"] for series in result["data"]["result"] if has_data({"data": {
        "result": [series]}})}  # fmt: skip
    rounds = [row for peer in ("peer-01", "peer-02") for row in read_rounds(work / peer)]
    failed = {row["cause"] for row in rounds if row["outcome"] != "ok"}
    assert failed, [(r["epoch"], r["outcome"], r["error"]) for r in rounds]
    assert shown and shown <= failed, (shown, failed)
    # the paired run's healthy rounds: their last all-reduce received all of the result
    params = {"query": f'trainer_averaging_received_share{{run_id="{RUN_ID}"}}', "start": begin, "end": end,
              "step": "1"}  # fmt: skip
    shares = get_json(f"{api}/query_range?{urllib.parse.urlencode(params)}")["data"]["result"]
    values = [float(v) for series in shares for _t, v in series["values"] if math.isfinite(float(v))]
    assert values and all(0 <= v <= 1 for v in values), values
