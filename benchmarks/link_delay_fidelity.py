"""How faithfully the user-space link delay gives the delay, jitter and rate it is set to (needs root).

Two peers in network namespaces on a bridge (benchmarks/shaped_netns.py: tbf at the rate on both ends of each
link), each running role link_shaping's program (roles/link_shaping/files/testbed_link_delay.py) on what it
receives, as the local cluster's containers do. Per setting it measures, between the two peers:

- the round trip of one-byte TCP messages (``trainer netprobe``'s pings, as playbooks/network.yml records them
  for every run): median, 5th and 95th percentile, standard deviation, against the set round trip (twice the
  one-way delay; each direction's jitter is independent, so the round trip's deviation is sqrt(2) x jitter);
- one TCP stream's throughput (``iperf3``, and netprobe's stream) against the set rate, and iperf3's
  retransmissions;
- the delay program's CPU time per MB it held, and the packets its queue held and dropped.

The settings are the modelled link at a time dilation D: the rate / D, the delay and jitter x D, as
controller/sizing.py dilates them (docs/time-dilation.md). Prints one table and writes the results as JSON.

    sudo .venv/bin/python benchmarks/link_delay_fidelity.py --dilation 1.7 --round-trips-ms 0,10,50 \
        --rate-mbit 1000 --out results/link-delay.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shaped_netns import ShapedNamespaces, benchmark_preflight  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "roles" / "link_shaping" / "files" / "testbed_link_delay.py"
QUEUE = 7


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted values (nearest rank).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.95)
    (2.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_delays(
    net: ShapedNamespaces, one_way_ms: float, jitter_ms: float, on_send: bool = False
) -> list[subprocess.Popen]:
    delays = []
    for index in range(net.peers):
        argv = [sys.executable, str(PROGRAM), "--queue", str(QUEUE), "--delay-ms", str(one_way_ms),
                "--jitter-ms", str(jitter_ms), "--interface", "eth0", "--source", f"{net.subnet}.0/24",
                "--seed", str(index), *(["--on-send"] if on_send else [])]  # fmt: skip
        delays.append(subprocess.Popen(net.command(index, argv), stdout=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 20
    for index in range(net.peers):  # ready once the program put its rule in place
        check = net.command(index, ["iptables", "-w", "-t", "mangle", "-S", "TESTBED_DELAY"])
        while subprocess.run(check, capture_output=True).returncode != 0:
            if time.monotonic() > deadline or delays[index].poll() is not None:
                raise RuntimeError(f"the delay program did not start in peer {index}")
            time.sleep(0.1)
    return delays


def _stop_delays(delays: list[subprocess.Popen], cpu: list[float]) -> list[str]:
    lines = []
    for process, started in zip(delays, cpu, strict=True):
        used = _cpu_seconds(process.pid) - started
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].strip().splitlines()
        lines.append(f"{output[-1] if output else ''} cpu_seconds={used:.3f}")
    return lines


def measure(net: ShapedNamespaces, pings: int, seconds: float) -> dict:
    """Round trips and netprobe's stream, then iperf3's, from peer 0 to peer 1."""
    probe = [sys.executable, "-m", "trainer", "netprobe"]
    address = net.address(1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(net.command(1, [*probe, "serve", "--bind", address, "--port", "5301"]),
                              stdout=subprocess.PIPE, env=env)  # fmt: skip
    send = [
        *probe,
        "send",
        "--to",
        address,
        "--port",
        "5301",
        "--pings",
        str(pings),
        "--seconds",
        str(seconds),
    ]
    sent = subprocess.run(net.command(0, send),
                          capture_output=True, text=True, env=env, timeout=300, check=True)  # fmt: skip
    server.communicate(timeout=60)
    netprobe = json.loads(sent.stdout)
    iperf_server = subprocess.Popen(net.command(1, ["iperf3", "-s", "-1", "-B", address, "-p", "5302"]),
                                    stdout=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.5)
    stream = ["iperf3", "-c", address, "-p", "5302", "-t", str(max(1, round(seconds))), "-J"]  # whole seconds
    client = subprocess.run(net.command(0, stream), capture_output=True, text=True, timeout=300, check=True)
    iperf_server.wait(timeout=60)
    iperf = json.loads(client.stdout)["end"]["sum_sent"]
    return {"netprobe": netprobe, "iperf3_mbit": iperf["bits_per_second"] / 1e6,
            "iperf3_retransmits": iperf.get("retransmits")}  # fmt: skip


def run_setting(rate_mbit: float, round_trip_ms: float, jitter_fraction: float, dilation: float, pings: int,
                seconds: float, on_send: bool = False) -> dict:  # fmt: skip
    """One modelled link (rate, round trip, jitter as a fraction of the one-way delay), at D."""
    one_way = round_trip_ms / 2 * dilation
    jitter = one_way * jitter_fraction
    host_rate = rate_mbit / dilation
    with ShapedNamespaces(peers=2, rate_mbit=host_rate) as net:
        delays = _start_delays(net, one_way, jitter, on_send) if one_way > 0 else []
        cpu = [_cpu_seconds(process.pid) for process in delays]
        measured = measure(net, pings, seconds)
        counts = _stop_delays(delays, cpu)
    trips = measured["netprobe"]["round_trip_ms"]
    return {
        "modelled": {"rate_mbit": rate_mbit, "round_trip_ms": round_trip_ms, "jitter_ms": jitter / dilation},
        "applied": {"rate_mbit": host_rate, "one_way_ms": one_way, "jitter_ms": jitter},
        "round_trip_ms": {"median": statistics.median(trips), "p5": percentile(trips, 0.05),
                          "p95": percentile(trips, 0.95), "stdev": statistics.stdev(trips),
                          "pings": len(trips)},
        "set_round_trip_ms": 2 * one_way,
        "set_round_trip_stdev_ms": math.sqrt(2) * jitter,
        "iperf3_mbit": measured["iperf3_mbit"],
        "iperf3_retransmits": measured["iperf3_retransmits"],
        "netprobe_mbit": measured["netprobe"]["bytes_per_second"] * 8 / 1e6,
        "delay_programs": counts,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dilation", type=float, default=1.0, help="D: the rate / D, delays x D")
    parser.add_argument("--rate-mbit", type=float, default=1000.0, help="the modelled link rate")
    parser.add_argument("--round-trips-ms", default="0,10,50", help="modelled round trips, comma-separated")
    parser.add_argument(
        "--jitter-fractions", default="0,0.1", help="jitter as fractions of the one-way delay"
    )
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0, help="each throughput measurement's length")
    parser.add_argument("--out", type=Path, help="the results as JSON")
    parser.add_argument(
        "--on-send",
        action="store_true",
        help="delay what each peer sends instead of what it receives (what TCP Small Queues do to that)",
    )
    args = parser.parse_args(argv)
    benchmark_preflight(parser.error)
    if args.dilation < 1 or args.rate_mbit <= 0 or not 2 <= args.pings <= 255:
        parser.error("--dilation must be >= 1, --rate-mbit > 0 and --pings within 2-255")
    round_trips = [float(value) for value in args.round_trips_ms.split(",")]
    fractions = [float(value) for value in args.jitter_fractions.split(",")]
    results = []
    where = "on what each peer sends" if args.on_send else "on what each peer receives"
    print(f"modelled link {args.rate_mbit:g} Mbit/s at D={args.dilation:g} (applied: rate / D, delay x D, "
          f"{where}); round trips of this machine, ms")  # fmt: skip
    print(f"{'RTT set':>8} {'jitter':>7} {'median':>8} {'p5':>8} {'p95':>8} {'sd':>6} {'sd set':>6} "
          f"{'iperf3 / rate':>13} {'retr':>5} {'netprobe / rate':>15}")  # fmt: skip
    for round_trip in round_trips:
        for fraction in fractions if round_trip > 0 else [0.0]:
            result = run_setting(
                args.rate_mbit, round_trip, fraction, args.dilation, args.pings, args.seconds, args.on_send
            )
            results.append(result)
            rtt, rate = result["round_trip_ms"], result["applied"]["rate_mbit"]
            print(f"{result['set_round_trip_ms']:8.2f} {result['applied']['jitter_ms']:7.2f} "
                  f"{rtt['median']:8.2f} {rtt['p5']:8.2f} {rtt['p95']:8.2f} {rtt['stdev']:6.2f} "
                  f"{result['set_round_trip_stdev_ms']:6.2f} "
                  f"{result['iperf3_mbit'] / rate:13.3f} {result['iperf3_retransmits']:>5} "
                  f"{result['netprobe_mbit'] / rate:15.3f}", flush=True)  # fmt: skip
            for line in result["delay_programs"]:
                print(f"{'':8} {line}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {"dilation": args.dilation, "on_send": args.on_send, "results": results}
        args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
