"""Bare processes on a shaped network: one network namespace per peer, joined by a bridge (needs root).

Each peer's namespace has one veth to the bridge, with a ``tbf`` qdisc at the set rate on both ends: on the
peer's end it shapes what the peer sends, on the bridge's end what it receives, so every peer has a
full-duplex link of that rate, as a VM's NIC would (the same tbf as roles/link_shaping: a 10 ms bucket, at
least 16000 bytes, 100 ms of queue). This kernel has no netem, so there is no delay here;
the links' latency is the bridge's.

    with ShapedNamespaces(peers=4, rate_mbit=100) as net:
        subprocess.run(net.command(0, ["python", "-c", "..."]))   # runs in peer 0's namespace
        net.address(1)                                             # 10.77.<pid % 250>.2
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUE_MS = 100  # as roles/link_shaping's link_shaping_queue_ms


def benchmark_preflight(error: Callable[[str], object]) -> None:
    """For a benchmark's main: refuse without root (``error``: its parser's), and let SIGTERM leave through
    the ``finally`` blocks and ``ShapedNamespaces.__exit__``, so no namespace outlives the benchmark."""
    if os.geteuid() != 0:
        error("needs root: every peer gets its own network namespace with a shaped link")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def tbf(rate_mbit: float) -> list[str]:
    """The qdisc arguments for a rate (as roles/link_shaping/tasks/apply.yml builds them).

    >>> tbf(100)
    ['tbf', 'rate', '100mbit', 'burst', '125000', 'latency', '100ms']
    >>> tbf(1)[4]
    '16000'
    """
    burst = max(int(rate_mbit * 1250), 16000)
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", f"{QUEUE_MS}ms"]


@dataclass
class ShapedNamespaces:
    """``peers`` namespaces ``{prefix}-{i}`` on bridge ``{prefix}-br``, links shaped to ``rate_mbit``.

    ``rate_mbit`` None leaves the links unshaped. ``prefix`` and ``subnet`` keep concurrent users apart (a
    test and a benchmark: two bridges with one subnet would share its route); names stay within the 15
    characters Linux allows an interface name.
    """

    peers: int
    rate_mbit: float | None = None
    prefix: str = f"sn{os.getpid() % 100000}"
    subnet: str = f"10.77.{os.getpid() % 250}"
    _created: list[str] = field(default_factory=list)

    def namespace(self, index: int) -> str:
        return f"{self.prefix}-{index}"

    def address(self, index: int) -> str:
        return f"{self.subnet}.{index + 1}"

    def command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run inside peer ``index``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(index), *argv]

    def qdiscs(self) -> list[str]:
        """What tc shows on each peer's side of its link (for the results)."""
        return [
            _ip(["netns", "exec", self.namespace(i), "tc", "qdisc", "show", "dev", "eth0", "root"]).strip()
            for i in range(self.peers)
        ]

    def __enter__(self) -> ShapedNamespaces:
        if self.rate_mbit is not None and self.rate_mbit <= 0:
            raise ValueError(f"rate_mbit must be > 0 (got {self.rate_mbit})")
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root (CAP_NET_ADMIN)")
        try:
            bridge = f"{self.prefix}-br"
            _ip(["link", "add", bridge, "type", "bridge"])
            self._created.append(f"link:{bridge}")
            _ip(["addr", "add", f"{self.subnet}.254/24", "dev", bridge])
            _ip(["link", "set", bridge, "up"])
            for index in range(self.peers):
                self._add_peer(index, bridge)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _add_peer(self, index: int, bridge: str) -> None:
        namespace, host_end = self.namespace(index), f"{self.prefix}-{index}h"
        _ip(["netns", "add", namespace])
        self._created.append(f"netns:{namespace}")
        _ip(["link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", namespace])
        self._created.append(f"link:{host_end}")
        _ip(["link", "set", host_end, "master", bridge, "up"])
        inside = ["netns", "exec", namespace, "ip"]
        _ip([*inside, "addr", "add", f"{self.address(index)}/24", "dev", "eth0"])
        _ip([*inside, "link", "set", "eth0", "up"])
        _ip([*inside, "link", "set", "lo", "up"])
        if self.rate_mbit is not None:
            _ip(
                [
                    "netns",
                    "exec",
                    namespace,
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    "eth0",
                    "root",
                    *tbf(self.rate_mbit),
                ]
            )
            _run(["tc", "qdisc", "replace", "dev", host_end, "root", *tbf(self.rate_mbit)])

    def __exit__(self, *exc: object) -> None:
        for item in reversed(self._created):
            kind, name = item.split(":", 1)
            if kind == "netns":
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "delete", name], capture_output=True)
        self._created.clear()


def _ip(args: list[str]) -> str:
    return _run(["ip", *args])


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout
