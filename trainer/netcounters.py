"""Bytes on the wire, from the kernel's interface counters (``/proc/net/dev``) of the trainer's network
namespace: one VM, or one container of the local cluster.

Every strategy is measured the same way, from outside its code: what its process and its helpers (Hivemind's
p2p daemon) sent and received between the start barrier's release and the loop's end. Loopback and the ``ifb``
devices that ingress shaping mirrors traffic into are not counted. What else crosses the interface in that
time is counted too: the exporter's answers to Prometheus (a few kB per scrape) in ``sent``, and the dataset's
reads from CephFS or NFS in ``received``. So ``sent_bytes_per_sample`` is the communication figure the report
compares: low-communication methods are compared on exactly it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NET_DEV = Path("/proc/net/dev")


@dataclass(frozen=True)
class NetCounters:
    received_bytes: int
    sent_bytes: int
    interfaces: tuple[str, ...]


def counted(interface: str) -> bool:
    """Whether an interface's traffic counts (not loopback, not an ``ifb`` mirror of ingress traffic)."""
    return interface != "lo" and not interface.startswith("ifb")


def parse(text: str) -> NetCounters:
    """Sum the counted interfaces of a ``/proc/net/dev`` text.

    >>> text = '''Inter-|   Receive |  Transmit
    ...  face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets
    ...     lo: 500 5 0 0 0 0 0 0 500 5 0 0 0 0 0 0
    ...   eth0: 1200 10 0 0 0 0 0 0 3400 20 0 0 0 0 0 0
    ...   ifb0: 1200 10 0 0 0 0 0 0 1200 10 0 0 0 0 0 0'''
    >>> parse(text)
    NetCounters(received_bytes=1200, sent_bytes=3400, interfaces=('eth0',))
    """
    received = sent = 0
    names = []
    for line in text.splitlines()[2:]:
        name, _, numbers = line.partition(":")
        name, fields = name.strip(), numbers.split()
        if not counted(name) or len(fields) < 9:
            continue
        received += int(fields[0])
        sent += int(fields[8])
        names.append(name)
    return NetCounters(received, sent, tuple(names))


def snapshot() -> NetCounters | None:
    """The counters now, or None where ``/proc/net/dev`` cannot be read."""
    try:
        return parse(NET_DEV.read_text())
    except OSError:
        return None


def traffic(start: NetCounters | None, end: NetCounters | None, samples: int) -> dict[str, object] | None:
    """summary.json's ``network``: bytes sent and received between two snapshots, and per local sample.

    >>> traffic(NetCounters(100, 1000, ("eth0",)), NetCounters(300, 5000, ("eth0",)), 40)
    {'sent_bytes': 4000, 'received_bytes': 200, 'sent_bytes_per_sample': 100.0, 'interfaces': ['eth0']}
    """
    if start is None or end is None:
        return None
    sent = end.sent_bytes - start.sent_bytes
    return {
        "sent_bytes": sent,
        "received_bytes": end.received_bytes - start.received_bytes,
        "sent_bytes_per_sample": sent / samples if samples else None,
        "interfaces": list(end.interfaces),
    }
