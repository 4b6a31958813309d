"""The bytes this peer's Hivemind traffic sent and received, counted apart from every other flow
on the interface (Prometheus' scrapes, the bandwidth probe, cross traffic, SSH): role cluster_firewall keeps
two iptables chains, ``TESTBED_TX`` (jumped to first from OUTPUT) and ``TESTBED_RX`` (from INPUT), each with
one rule that counts the TCP packets from or to the host's Hivemind port (``-m multiport --ports``: libp2p
may dial from its listening port, so a packet can carry the port on both sides). The kernel keeps the
counters; reading them is one ``iptables -xnvL`` per chain.

Besides each round's bytes, the strategy reads the chains as training starts and once it is done
(``RunTraffic``): the run's total, exact where rounds overlap in time (a background state round beside a
gradient round: each round's own count holds both).

Where the chains are not there (a trainer started by hand, the tests' loopback peers, a host without the
firewall) the counter says so once and every reading is None: rounds.csv's byte columns stay empty.
Only Hivemind's traffic is counted: gloo's pair connections (DDP, ZeRO, DiLoCo) use the kernel's ephemeral
ports on both sides, which other flows use too.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: the chains role cluster_firewall fills (its ``cluster_firewall_traffic_chains``; a test keeps them equal)
SENT_CHAIN = "TESTBED_TX"
RECEIVED_CHAIN = "TESTBED_RX"


@dataclass(frozen=True)
class Traffic:
    """Cumulative bytes of the host's Hivemind traffic since the chains were (re)filled."""

    sent: int
    received: int

    def since(self, earlier: Traffic) -> Traffic:
        """The bytes between two readings; None-safe callers check both first. A counter that went back (the
        firewall was restarted in between) counts from zero."""
        sent = self.sent - earlier.sent
        received = self.received - earlier.received
        return Traffic(sent if sent >= 0 else self.sent, received if received >= 0 else self.received)


def chain_bytes(listing: str) -> int:
    """The bytes counted by a chain's rules, from ``iptables -xnvL CHAIN``.

    >>> chain_bytes('''Chain TESTBED_TX (1 references)
    ...     pkts      bytes target     prot opt in     out     source               destination
    ...    12091  9054316            tcp  --  *      *       0.0.0.0/0     0.0.0.0/0     multiport ports 31337
    ... ''')
    9054316
    """
    total = 0
    for line in listing.splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit() and fields[1].isdigit():
            total += int(fields[1])
    return total


class TrafficCounter:
    """Reads the two chains; ``read()`` is None where they are not there (said once in the log)."""

    def __init__(self, iptables: str | None = None) -> None:
        found = shutil.which("iptables") or shutil.which("iptables", path="/usr/sbin:/sbin")
        self._iptables = iptables or found
        self._available = self._iptables is not None

    @property
    def available(self) -> bool:
        return self._available

    def read(self) -> Traffic | None:
        if not self._available:
            return None
        try:
            sent, received = (self._chain(name) for name in (SENT_CHAIN, RECEIVED_CHAIN))
        except (OSError, subprocess.SubprocessError) as error:
            self._available = False
            log.info("no per-round traffic counts: the firewall's chains cannot be read (%s)", error)
            return None
        return Traffic(sent, received)

    def _chain(self, name: str) -> int:
        listing = subprocess.run(
            [str(self._iptables), "-w", "-x", "-n", "-v", "-L", name],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        return chain_bytes(listing)


class RunTraffic:
    """The host's Hivemind bytes over a whole run: ``start()`` as training starts, ``stop()`` once the peer is
    done (after its last rounds and the finish grace); None where the chains could not be read."""

    def __init__(self, counter: TrafficCounter) -> None:
        self._counter = counter
        self._started: Traffic | None = None

    def start(self) -> None:
        self._started = self._counter.read()

    def stop(self) -> dict[str, int] | None:
        """{"sent_bytes", "received_bytes"} since ``start()``, or None."""
        ended = self._counter.read()
        if self._started is None or ended is None:
            return None
        between = ended.since(self._started)
        return {"sent_bytes": between.sent, "received_bytes": between.received}
