"""A DHT-only Hivemind node: a run's bootstrap that does not train (``trainer dht``).

Hivemind's own examples start a collaboration from one or more such nodes (``hivemind-dht``) and let every
trainer join them, so that no trainer also serves the newcomers' first DHT requests. Here the node writes its
visible multiaddrs to ``<results-dir>/multiaddrs.txt`` (as a bootstrap peer does; the playbook reads the file
and hands the peers the address to join), serves until SIGTERM or SIGINT, and on its way out writes
``dht.json``: its listen address, multiaddrs, the seconds it served and the CPU seconds it used (itself, the
DHT process and p2pd), so the cost of bootstrapping shows beside the peers' results.

Under time dilation (``--time-dilation D``, docs/time-dilation.md) the node's DHT timers wait D times as long,
like every peer's: the node serves a cluster that runs D times slower than the one it models.

    trainer dht --listen /ip4/0.0.0.0/tcp/31337 --results-dir /var/lib/testbed/results/RUN/monitor
"""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiment.results import write_json_atomic, write_multiaddrs
from trainer.config import ConfigError, check_multiaddr
from trainer.dilation import check_factor, dht_options

log = logging.getLogger(__name__)

#: the record the node leaves in its results directory when it stops
RECORD_FILE = "dht.json"


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for (the DHT, p2pd)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def serve(
    listen: str,
    results_dir: Path,
    stop: threading.Event,
    on_start: Callable[[], None] | None = None,
    time_dilation: float = 1.0,
) -> dict[str, Any]:
    """Run a DHT node on `listen` until `stop` is set; its multiaddrs in `results_dir`; the record.

    `on_start` is called once the DHT's processes exist (signal handlers go there: the processes the DHT
    forks must not inherit them). `time_dilation`: D, the factor the DHT's timers are scaled by.
    """
    import hivemind

    started = time.monotonic()
    dht = hivemind.DHT(start=True, host_maddrs=[listen], **dht_options(time_dilation))
    if on_start is not None:
        on_start()
    addresses = [str(address) for address in dht.get_visible_maddrs()]
    path = write_multiaddrs(results_dir, addresses)
    log.info("DHT node up, multiaddrs in %s: %s", path, " ".join(addresses))
    try:
        stop.wait()
    finally:
        dht.shutdown()
    record = {
        "listen": listen,
        "multiaddrs": addresses,
        "time_dilation": time_dilation,
        "served_seconds": round(time.monotonic() - started, 3),
        "cpu_seconds": round(_cpu_seconds(), 3),
    }
    write_json_atomic(results_dir / RECORD_FILE, record)
    return record


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``trainer dht`` (trainer/cli.py)."""
    parser.add_argument("--listen", default="/ip4/0.0.0.0/tcp/31337", help="multiaddr to listen on")
    parser.add_argument("--results-dir", required=True, type=Path, help="for multiaddrs.txt and dht.json")
    parser.add_argument(
        "--time-dilation",
        type=float,
        default=1.0,
        help="D: the node's DHT timers wait D times their Hivemind defaults (>= 1; 1: none)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        check_multiaddr(args.listen, field_name="listen", require_peer_id=False)
        problem = check_factor(args.time_dilation)
        if problem:
            raise ConfigError(problem, "time_dilation", args.time_dilation)
    except ConfigError as exc:
        print(f"trainer: error: dht: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def stop_on_signals() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())

    record = serve(
        args.listen, args.results_dir, stop, on_start=stop_on_signals, time_dilation=args.time_dilation
    )
    served, used = record["served_seconds"], record["cpu_seconds"]
    log.info("DHT node stopped after %.0f s, %.1f CPU seconds", served, used)
    return 0
