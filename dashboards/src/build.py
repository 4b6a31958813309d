"""Build the Grafana dashboards of the testbed (dashboards/*.json) from plain Python data.

Run ``python dashboards/src/build.py`` after editing this file; ``--check`` exits 1 when the committed JSON
differs from what this source produces (tests/monitoring/test_dashboards.py runs the same check).

Metric names come from trainer/telemetry.py (METRICS) and the recording rules of the prometheus role
(roles/prometheus/templates/testbed.rules.yml.j2); the tests check both directions. Selectors, units and the
datasource live in the constants below, once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[1]

# The datasource the grafana role provisions (roles/grafana/templates/datasources.yml.j2).
DATASOURCE = {"type": "prometheus", "uid": "testbed-prometheus"}
# Selectors of the template variables.
RUN = 'run_id=~"$run_id"'
TRAINER = 'run_id=~"$run_id", peer=~"$peer"'
HOST = 'host=~"$host"'
RATE = "$__rate_interval"

PANEL_WIDTH = 12
PANEL_HEIGHT = 8


def target(
    expr: str, legend: str, ref: str = "A", *, instant: bool = False, table: bool = False
) -> dict[str, Any]:
    """One PromQL query of a panel."""
    return {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": not instant,
        "instant": instant,
        "format": "table" if table else "time_series",
    }


def targets(*queries: tuple[str, str]) -> list[dict[str, Any]]:
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def timeseries(
    title: str,
    description: str,
    queries: list[dict[str, Any]],
    *,
    unit: str = "short",
    stacked: bool = False,
    repeat: str | None = None,
    minimum: float | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 60 if stacked else 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if stacked else "none", "group": "A"},
        },
    }
    if minimum is not None:
        defaults["min"] = minimum
    panel = {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": queries,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }
    if repeat:
        panel.update({"repeat": repeat, "repeatDirection": "h", "maxPerRow": 4})
    return panel


def row(title: str) -> dict[str, Any]:
    """A row header: the panels after it, up to the next row, are its panels (full width, never collapsed)."""
    return {
        "type": "row",
        "title": title,
        "datasource": DATASOURCE,
        "targets": [],
        "collapsed": False,
        "panels": [],
    }


def stat(
    title: str, description: str, queries: list[dict[str, Any]], *, unit: str = "short"
) -> dict[str, Any]:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": queries,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "value_and_name",
        },
    }


def bargauge(title: str, description: str, queries: list[dict[str, Any]], *, unit: str) -> dict[str, Any]:
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": queries,
        "fieldConfig": {"defaults": {"unit": unit, "min": 0, "max": 1}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "gradient",
        },
    }


def table(title: str, description: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": queries,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
        "transformations": [
            {"id": "labelsToFields", "options": {"mode": "columns"}},
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}},
        ],
    }


def query_variable(name: str, label: str, query: str, *, multi: bool) -> dict[str, Any]:
    """A template variable filled from label values; with ``multi`` it offers "All" (regex .+)."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "allValue": ".+" if multi else None,
        "current": {},
        "options": [],
        "hide": 0,
    }


def layout(panels: list[dict[str, Any]], widths: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Give panels ids and grid positions, two per line unless a width is given (24 = full line); a row
    header is one unit high and starts a line of its own."""
    widths = widths or {}
    x = y = line_height = 0
    placed = []
    for panel_id, panel in enumerate(panels, start=1):
        is_row = panel["type"] == "row"
        width = 24 if is_row else widths.get(panel["title"], PANEL_WIDTH)
        height = 1 if is_row else PANEL_HEIGHT
        if x + width > 24 or is_row:
            x, y = 0, y + line_height
            line_height = 0
        placed.append({"id": panel_id, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **panel})
        x, line_height = x + width, max(line_height, height)
    return placed


def dashboard(
    uid: str, title: str, description: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["testbed"],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "schemaVersion": 39,
        "version": 1,
        "templating": {"list": variables},
        # the other dashboard, same time range and variables
        "links": [
            {
                "type": "dashboards",
                "tags": ["testbed"],
                "asDropdown": False,
                "keepTime": True,
                "includeVars": True,
                "title": "Testbed",
            }
        ],
        "panels": panels,
        "annotations": {"list": []},
    }


def per_step(component: str) -> str:
    """Mean seconds per step a peer spent in one component over the rate interval."""
    return (
        f"sum by (peer) (rate({component}_sum{{{TRAINER}}}[{RATE}]))"
        f" / sum by (peer) (rate(trainer_step_seconds_count{{{TRAINER}}}[{RATE}]))"
    )


def quantile(q: float, histogram: str, by: str) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({histogram}_bucket{{{TRAINER}}}[{RATE}])))"


def experiment() -> dict[str, Any]:
    panels = [
        timeseries(
            "Step time breakdown: $peer",
            "Mean seconds per local step, stacked: waiting for data, forward/backward, blocked on Hivemind "
            "averaging (matchmaking, all-reduce, state averaging; 0 for the baseline), and the rest of the "
            "optimizer step. One panel per peer.",
            targets(
                (per_step("trainer_data_loading_seconds"), "data"),
                (per_step("trainer_compute_seconds"), "compute"),
                (per_step("trainer_step_averaging_seconds"), "averaging"),
                (
                    f"{per_step('trainer_optimizer_seconds')} - {per_step('trainer_step_averaging_seconds')}",
                    "other optimizer",
                ),
            ),
            unit="s",
            stacked=True,
            repeat="peer",
            minimum=0,
        ),
        timeseries(
            "Share of step time per peer",
            "Recording rules peer:trainer_*_share:ratio_rate1m (1-minute window); a data share above the "
            "alert threshold is a data-loading bottleneck.",
            targets(
                (f"peer:trainer_data_loading_share:ratio_rate1m{{{TRAINER}}}", "{{peer}} data"),
                (f"peer:trainer_compute_share:ratio_rate1m{{{TRAINER}}}", "{{peer}} compute"),
                (f"peer:trainer_averaging_share:ratio_rate1m{{{TRAINER}}}", "{{peer}} averaging"),
                (f"peer:trainer_optimizer_other_share:ratio_rate1m{{{TRAINER}}}", "{{peer}} other optimizer"),
            ),
            unit="percentunit",
            minimum=0,
        ),
        timeseries(
            "Step time p50 / p95",
            "Quantiles of the local step duration per peer.",
            targets(
                (quantile(0.5, "trainer_step_seconds", "peer"), "{{peer}} p50"),
                (quantile(0.95, "trainer_step_seconds", "peer"), "{{peer}} p95"),
            ),
            unit="s",
        ),
        timeseries(
            "Averaging round duration",
            "All-reduce time of Hivemind averaging rounds (blocking time where the all-reduce was not "
            "measured), by peer and round kind: p50 and mean; and seconds per second spent averaging.",
            targets(
                (quantile(0.5, "trainer_averaging_seconds", "peer, kind"), "{{peer}} {{kind}} p50"),
                (
                    f"sum by (peer, kind) (rate(trainer_averaging_seconds_sum{{{TRAINER}}}[{RATE}]))"
                    f" / sum by (peer, kind) (rate(trainer_averaging_seconds_count{{{TRAINER}}}[{RATE}]))",
                    "{{peer}} {{kind}} mean",
                ),
                (f"peer:trainer_averaging_seconds:rate1m{{{TRAINER}}}", "{{peer}} {{kind}} s/s"),
            ),
            unit="s",
        ),
        timeseries(
            "Averaging rounds by outcome",
            "Averaging rounds started per minute, by outcome (ok, failed, timeout).",
            targets(
                (
                    "60 * sum by (peer, outcome) "
                    f"(rate(trainer_averaging_rounds_total{{{TRAINER}}}[{RATE}]))",
                    "{{peer}} {{outcome}}",
                ),
            ),
            unit="short",
            minimum=0,
        ),
        stat(
            "Failed averaging rounds",
            "Rounds that failed or timed out since the peer started (the AveragingRoundsFailing alert "
            "fires when their share is high).",
            targets(
                (
                    f'sum by (peer) (trainer_averaging_rounds_total{{{TRAINER}, outcome!="ok"}})',
                    "{{peer}}",
                ),
            ),
        ),
        timeseries(
            "Samples per second",
            "Training throughput per peer and of the whole run (recording rules, 1-minute window).",
            targets(
                (f"peer:trainer_samples:rate1m{{{TRAINER}}}", "{{peer}}"),
                (f"run:trainer_samples:rate1m{{{RUN}}}", "total {{run_id}}"),
            ),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Steps per second",
            "Local steps per second per peer.",
            targets((f"sum by (peer) (rate(trainer_steps_total{{{TRAINER}}}[{RATE}]))", "{{peer}}")),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Training loss",
            "Loss of each peer's latest step.",
            targets((f"trainer_loss{{{TRAINER}}}", "{{peer}}")),
        ),
        timeseries(
            "Memory per peer",
            "Resident set of each trainer process per step, and the bytes of its parameters, gradients and "
            "optimizer state (ZeRO: its shard), set at the loop's end.",
            targets((f"trainer_memory_bytes{{{TRAINER}}}", "{{peer}} {{kind}}")),
            unit="bytes",
            minimum=0,
        ),
        timeseries(
            "Hivemind epoch",
            "Collective epoch each peer is in (0 for the baseline).",
            targets((f"trainer_hivemind_epoch{{{TRAINER}}}", "{{peer}}")),
        ),
        stat(
            "Peers alive",
            "Live peers in the DHT as each peer sees them, and trainer exporters Prometheus reaches.",
            targets(
                (f"max by (run_id) (trainer_peers{{{TRAINER}}})", "in DHT"),
                ('sum(up{job="trainer", peer=~"$peer"})', "exporters up"),
            ),
        ),
        bargauge(
            "Progress towards the target batch size",
            "Samples all peers accumulated in the current Hivemind epoch, as a share of the target batch "
            "size.",
            targets(
                (
                    f"max by (run_id) (trainer_collective_samples{{{TRAINER}}})"
                    f" / max by (run_id) (trainer_target_batch_size{{{TRAINER}}} > 0)",
                    "{{run_id}}",
                ),
            ),
            unit="percentunit",
        ),
        stat(
            "Run started",
            "When the start barrier released each peer (milliseconds for Grafana's date unit).",
            targets((f"(trainer_start_timestamp_seconds{{{TRAINER}}} > 0) * 1000", "{{peer}}")),
            unit="dateTimeAsIso",
        ),
        stat(
            "Time dilation D",
            "How many times slower each peer runs than the VM it models (docs/time-dilation.md). Times on "
            "this dashboard are measured: divide them by D (and multiply rates by D) for the modelled VM's.",
            targets((f"trainer_time_dilation{{{TRAINER}}}", "{{peer}}")),
            unit="none",
        ),
        table(
            "Run settings",
            "Settings of the run as reported by each peer (trainer_run_info).",
            [target(f"trainer_run_info{{{TRAINER}}}", "", instant=True, table=True)],
        ),
        row("Round health: failed rounds by cause, matchmaking, the share of each all-reduce received"),
        timeseries(
            "Failed rounds by cause",
            "Averaging rounds per minute that failed or timed out, per peer and cause (recording rule "
            "peer:trainer_averaging_failures:rate1m): no_group (matchmaking found nobody), "
            "allreduce_timeout, peer_left, partial (parts of the result never came), behind (the peer was an "
            "epoch behind), state_download, other (a cause shows while it occurs; 'all' is every cause "
            "together). rounds.csv has every round with its error.",
            targets(
                (f"60 * peer:trainer_averaging_failures:rate1m{{{TRAINER}}} > 0", "{{peer}} {{cause}}"),
                (f"60 * sum by (peer) (peer:trainer_averaging_failures:rate1m{{{TRAINER}}})", "{{peer}} all"),
            ),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Matchmaking time",
            "Time a round spent forming its group, per peer and round kind: p50 and mean (a round that "
            "found no group spent all of its time here).",
            targets(
                (quantile(0.5, "trainer_matchmaking_seconds", "peer, kind"), "{{peer}} {{kind}} p50"),
                (
                    f"sum by (peer, kind) (rate(trainer_matchmaking_seconds_sum{{{TRAINER}}}[{RATE}]))"
                    f" / sum by (peer, kind) (rate(trainer_matchmaking_seconds_count{{{TRAINER}}}[{RATE}]))",
                    "{{peer}} {{kind}} mean",
                ),
            ),
            unit="s",
            minimum=0,
        ),
        timeseries(
            "Received share of the last all-reduce",
            "Share of the averaged results each peer received in its latest all-reduce of each kind: 1 is "
            "all of it; below 1, Hivemind ended the round with parts missing and the peer kept its own "
            "values for them (a partial round). Gaps: no all-reduce yet.",
            targets((f"trainer_averaging_received_share{{{TRAINER}}}", "{{peer}} {{kind}}")),
            unit="percentunit",
            minimum=0,
        ),
        row("Network: each peer's Hivemind traffic, counted apart from other flows"),
        timeseries(
            "Hivemind traffic",
            "Mbit/s this peer's host sent and received on Hivemind's port during its all-reduces, averaged "
            "over time (trainer_averaging_bytes_total: the firewall's counting chains, trainer/traffic.py; 0 "
            "where they are not there). Measured: multiply by D for a dilated run's modelled rate.",
            targets(
                (
                    f"8 * sum by (peer, direction) (rate(trainer_averaging_bytes_total{{{TRAINER}}}[{RATE}]))"
                    " / 1e6",
                    "{{peer}} {{direction}}",
                )
            ),
            unit="Mbits",
            minimum=0,
        ),
        timeseries(
            "Link rate during all-reduces",
            "Mbit/s each peer sent while an all-reduce ran: its Hivemind bytes over its all-reduce seconds, "
            "the rate its link gave the averaging (compare with the run's bandwidth_mbit / D where shaped; "
            "rounds.csv's sent_mbit_per_second per round, the report's link_rates). Measured, as above.",
            targets(
                (
                    f'8 * sum by (peer) (rate(trainer_averaging_bytes_total{{{TRAINER}, direction="sent"}}'
                    f"[{RATE}])) / clamp_min(sum by (peer) (rate(trainer_averaging_seconds_sum{{{TRAINER}}}"
                    f"[{RATE}])), 1e-9) / 1e6",
                    "{{peer}}",
                )
            ),
            unit="Mbits",
            minimum=0,
        ),
        timeseries(
            "Egress beside Hivemind's",
            "Mbit/s each peer's host sent besides its Hivemind traffic: cross traffic (-e cross_traffic, "
            "docs/network.md), the bandwidth probe, scrapes, storage. The node exporter's interface counters "
            "minus the firewall's Hivemind count: a cross-traffic window shows as a step on its source host. "
            "Measured, as above.",
            targets(
                (
                    "8 * (sum by (peer) (rate(node_network_transmit_bytes_total"
                    f'{{peer=~"$peer", device!="lo"}}[{RATE}])) - sum by (peer) '
                    f'(rate(trainer_averaging_bytes_total{{{TRAINER}, direction="sent"}}[{RATE}]))) / 1e6',
                    "{{peer}}",
                )
            ),
            unit="Mbits",
            minimum=0,
        ),
    ]
    variables = [
        query_variable("run_id", "Run", "label_values(trainer_run_info, run_id)", multi=False),
        query_variable("peer", "Peer", 'label_values(trainer_run_info{run_id=~"$run_id"}, peer)', multi=True),
    ]
    widths = {"Step time breakdown: $peer": 6, "Run settings": 24}
    return dashboard(
        "testbed-experiment",
        "Testbed: Experiment",
        "One training run: where step time goes, Hivemind averaging, throughput and progress.",
        layout(panels, widths),
        variables,
    )


def hosts() -> dict[str, Any]:
    panels = [
        timeseries(
            "CPU busy",
            "Share of CPU time not idle, per host (all cores).",
            targets(
                (
                    f'1 - avg by (host) (rate(node_cpu_seconds_total{{{HOST}, mode="idle"}}[{RATE}]))',
                    "{{host}}",
                )
            ),
            unit="percentunit",
            minimum=0,
        ),
        timeseries(
            "Load average (1 min)",
            "Runnable tasks, per host.",
            targets((f"node_load1{{{HOST}}}", "{{host}}")),
            minimum=0,
        ),
        timeseries(
            "Memory used",
            "Total minus available memory, per host.",
            targets(
                (
                    f"node_memory_MemTotal_bytes{{{HOST}}} - node_memory_MemAvailable_bytes{{{HOST}}}",
                    "{{host}}",
                )
            ),
            unit="bytes",
            minimum=0,
        ),
        timeseries(
            "Network throughput",
            "Bytes per second received and sent per host (all interfaces but loopback).",
            targets(
                (
                    f'sum by (host) (rate(node_network_receive_bytes_total{{{HOST}, device!="lo"}}[{RATE}]))',
                    "{{host}} received",
                ),
                (
                    f"sum by (host) (rate(node_network_transmit_bytes_total"
                    f'{{{HOST}, device!="lo"}}[{RATE}]))',
                    "{{host}} sent",
                ),
            ),
            unit="Bps",
            minimum=0,
        ),
    ]
    variables = [query_variable("host", "Host", "label_values(node_uname_info, host)", multi=True)]
    return dashboard(
        "testbed-hosts",
        "Testbed: Hosts",
        "CPU, memory and network of every host, from node_exporter.",
        layout(panels),
        variables,
    )


DASHBOARDS = {"experiment.json": experiment, "hosts.json": hosts}


def render() -> dict[str, str]:
    """File name → JSON text, exactly as committed."""
    return {name: json.dumps(build(), indent=2, sort_keys=True) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed dashboard is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = DASHBOARDS_DIR / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python dashboards/src/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
