#!/usr/bin/python3
"""Holds every packet an NFQUEUE queue gives it for a set delay (with jitter), then lets it through.

The link delay of a host whose kernel has no netem: role link_shaping runs this program as the transient unit
testbed-link-delay. It binds queue ``--queue``, then sends to it what arrives on ``--interface`` from
``--source`` (but for TCP to the ``--skip-port`` ports: the controller's SSH), by an iptables chain
TESTBED_DELAY in mangle PREROUTING, and removes the chain again before it ends. It speaks nfnetlink_queue over
a netlink socket with Python's standard library only, so any host with python3 and iptables runs it.

- Each packet is released ``--delay-ms`` after it was read, plus a jitter drawn from a normal distribution of
  standard deviation ``--jitter-ms`` (truncated at zero delay). Packets leave in the order they came: a packet
  drawn to leave before the one ahead of it leaves with it (netem reorders under jitter unless it also has a
  rate). Only the packets' metadata is copied to user space (NFQNL_COPY_META), and GSO packets stay whole.
- Delaying on arrival, not on sending: a packet a local socket sent stays charged to that socket while it is
  queued, so TCP Small Queues would stall the sender after about a millisecond of held data; a received packet
  belongs to no local socket. With every host delayed alike, each direction of a link gets the delay once.
- The rule comes after the queue is bound and goes before it is unbound, and has no bypass: should the
  program die without removing it, the cluster's traffic stops (the kernel drops what no program holds), so
  a missing delay never passes silently; ``--remove`` clears such a rule. Ready (sd_notify READY=1) once the
  rule is in place.
- SIGTERM removes the rule, lets every held packet through at once, unbinds, and prints one line of counts.

Usage: testbed_link_delay.py --queue 7 --delay-ms 40 [--jitter-ms 4] --interface eth0 --source 10.89.66.0/24
           [--skip-port 22]
       testbed_link_delay.py --remove
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time

NETLINK_NETFILTER = 12
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NETLINK_NO_ENOBUFS = 5
SOL_NETLINK = 270
SO_SNDBUFFORCE = 32  # Linux's; Python's socket module does not name them
SO_RCVBUFFORCE = 33
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
NLA_TYPE_MASK = 0x3FFF
CHAIN = "TESTBED_DELAY"

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id (host order)
_ATTR = struct.Struct("=HH")  # nlattr: length, type (host order); payloads big-endian where nfnetlink says


def _align(length: int) -> int:
    return (length + 3) & ~3


def attribute(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes.

    >>> attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 5)).hex()
    '0800030000000005'
    """
    data = _ATTR.pack(_ATTR.size + len(payload), kind) + payload
    return data + b"\0" * (_align(len(data)) - len(data))


def message(kind: int, queue: int, attributes: bytes, sequence: int, flags: int = NLM_F_REQUEST) -> bytes:
    """A nfnetlink_queue message of ``kind`` for ``queue`` (nfgenmsg: AF_UNSPEC, version 0, the queue
    big-endian), with its netlink header.

    >>> m = message(NFQNL_MSG_CONFIG, 7, b"", 1)
    >>> _HEADER.unpack_from(m)[:3], m[_HEADER.size:].hex()
    ((20, 770, 1), '00000007')
    """
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue) + attributes
    return _HEADER.pack(_HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, sequence, 0) + body


def verdict_batch(queue: int, packet_id: int, sequence: int) -> bytes:
    """Accept every queued packet up to and including ``packet_id`` (the kernel releases them in order)."""
    return message(
        NFQNL_MSG_VERDICT_BATCH,
        queue,
        attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)),
        sequence,
    )


def messages(buffer: bytes):
    """The (type, flags, payload) of each netlink message in one datagram."""
    offset = 0
    while offset + _HEADER.size <= len(buffer):
        length, kind, flags, _, _ = _HEADER.unpack_from(buffer, offset)
        if length < _HEADER.size or offset + length > len(buffer):
            return
        yield kind, flags, buffer[offset + _HEADER.size : offset + length]
        offset += _align(length)


def packet_id(payload: bytes) -> int | None:
    """The id in a NFQNL_MSG_PACKET payload (after its 4-byte nfgenmsg), None if it has no packet header.

    >>> header = attribute(NFQA_PACKET_HDR, struct.pack("!IHB", 42, 0x0800, 0))
    >>> packet_id(b"\\0\\0\\0\\7" + attribute(5, b"\\0\\0\\0\\2") + header)
    42
    """
    offset = 4
    while offset + _ATTR.size <= len(payload):
        length, kind = _ATTR.unpack_from(payload, offset)
        if length < _ATTR.size:
            return None
        if kind & NLA_TYPE_MASK == NFQA_PACKET_HDR:
            return struct.unpack_from("!I", payload, offset + _ATTR.size)[0]
        offset += _align(length)
    return None


class Schedule:
    """When each packet leaves: its arrival plus the delay and a jitter, never before the packet ahead of it.

    >>> s = Schedule(delay=0.040, jitter=0.0, rng=random.Random(0))
    >>> round(s.add(1, 10.0), 6), round(s.add(2, 10.001), 6), s.due(10.0405), len(s)
    (10.04, 10.041, 1, 1)
    >>> s = Schedule(delay=0.040, jitter=0.010, rng=random.Random(0))
    >>> releases = [s.add(n, 10.0 + n / 1000) for n in range(100)]
    >>> releases == sorted(releases), min(releases) >= 10.0
    (True, True)
    """

    def __init__(self, delay: float, jitter: float, rng: random.Random) -> None:
        self.delay, self.jitter, self.rng = delay, jitter, rng
        self.held: collections.deque[tuple[float, int]] = collections.deque()
        self.last_release = 0.0
        self.most_held = 0

    def add(self, packet: int, arrived: float) -> float:
        drawn = self.delay + (self.rng.gauss(0.0, self.jitter) if self.jitter > 0 else 0.0)
        release = max(self.last_release, arrived + max(0.0, drawn))
        self.held.append((release, packet))
        self.last_release = release
        self.most_held = max(self.most_held, len(self.held))
        return release

    def due(self, now: float) -> int | None:
        """The last packet due by ``now`` (all before it are due too), taken off the schedule, or None."""
        last = None
        while self.held and self.held[0][0] <= now:
            last = self.held.popleft()[1]
        return last

    def next_release(self) -> float | None:
        return self.held[0][0] if self.held else None

    def __len__(self) -> int:
        return len(self.held)


class Queue:
    """One bound nfnetlink_queue queue on a netlink socket."""

    def __init__(self, number: int, max_len: int) -> None:
        self.number = number
        self.sequence = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        for option, value in ((SO_RCVBUFFORCE, 16 << 20), (SO_SNDBUFFORCE, 4 << 20)):
            with contextlib.suppress(PermissionError):
                self.sock.setsockopt(socket.SOL_SOCKET, option, value)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self._configure(
            attribute(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_BIND, 0) + struct.pack("!H", 0))
        )
        self._configure(attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)))
        self._configure(attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_len)))
        self._configure(
            attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
            + attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))
        )
        self.sock.setblocking(False)

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _configure(self, attributes: bytes) -> None:
        """Send one config message and wait for the kernel's acknowledgement (an error raises)."""
        sequence = self._next()
        self.sock.sendto(
            message(NFQNL_MSG_CONFIG, self.number, attributes, sequence, NLM_F_REQUEST | NLM_F_ACK), (0, 0)
        )
        while True:
            for kind, _, payload in messages(self.sock.recv(65536)):
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0]
                    echoed = _HEADER.unpack_from(payload, 4)[3]
                    if echoed != sequence:
                        continue
                    if code:
                        raise OSError(
                            code, f"nfnetlink_queue refused queue {self.number}: {os.strerror(code)}"
                        )
                    return

    def read(self) -> list[int]:
        """The ids of every packet waiting on the socket (empty when none)."""
        ids = []
        while True:
            try:
                buffer = self.sock.recv(1 << 20)
            except BlockingIOError:
                return ids
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    continue
                raise
            for kind, _, payload in messages(buffer):
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    found = packet_id(payload)
                    if found is not None:
                        ids.append(found)

    def accept_through(self, packet: int) -> None:
        self.sock.sendto(verdict_batch(self.number, packet, self._next()), (0, 0))

    def unbind(self) -> None:
        self.sock.setblocking(True)
        cmd = struct.pack("=BB", NFQNL_CFG_CMD_UNBIND, 0) + struct.pack("!H", 0)
        self.sock.sendto(
            message(NFQNL_MSG_CONFIG, self.number, attribute(NFQA_CFG_CMD, cmd), self._next()), (0, 0)
        )
        self.sock.close()


def notify_ready() -> None:
    """Tell systemd the queue is bound (Type=notify), when run as a unit."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"READY=1", address)


def rules(
    queue: int, interface: str, source: str, skip_ports: list[int], on_send: bool = False
) -> list[list[str]]:
    """The iptables commands that queue the interface's arriving packets from ``source`` (``on_send``: its
    leaving packets to ``source``, only to measure what that does: the module docstring).

    >>> for rule in rules(7, "eth0", "10.0.0.0/24", [22]): print(" ".join(rule[4:]))
    -N TESTBED_DELAY
    -A TESTBED_DELAY -p tcp --dport 22 -j RETURN
    -A TESTBED_DELAY -i eth0 -s 10.0.0.0/24 -j NFQUEUE --queue-num 7
    -I PREROUTING 1 -j TESTBED_DELAY
    """
    mangle = ["iptables", "-w", "-t", "mangle"]
    where = ("OUTPUT", "-o", "-d", "--sport") if on_send else ("PREROUTING", "-i", "-s", "--dport")
    hook, device, peer, port = where
    return [
        [*mangle, "-N", CHAIN],
        *([*mangle, "-A", CHAIN, "-p", "tcp", port, str(number), "-j", "RETURN"] for number in skip_ports),
        [*mangle, "-A", CHAIN, device, interface, peer, source, "-j", "NFQUEUE", "--queue-num", str(queue)],
        [*mangle, "-I", hook, "1", "-j", CHAIN],
    ]


def remove_rules() -> bool:
    """Take the chain out of PREROUTING and delete it; whether there was one."""
    mangle = ["iptables", "-w", "-t", "mangle"]
    present = subprocess.run([*mangle, "-S", CHAIN], capture_output=True).returncode == 0
    for hook in ("PREROUTING", "OUTPUT"):
        while subprocess.run([*mangle, "-D", hook, "-j", CHAIN], capture_output=True).returncode == 0:
            pass
    if present:
        subprocess.run([*mangle, "-F", CHAIN], check=True, capture_output=True)
        subprocess.run([*mangle, "-X", CHAIN], check=True, capture_output=True)
    return present


def add_rules(commands: list[list[str]]) -> None:
    remove_rules()
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            remove_rules()
            raise OSError(f"{' '.join(command)}: {done.stderr.strip()}")


def run(queue: Queue, schedule: Schedule) -> dict[str, float]:
    """Hold and release packets until SIGTERM or SIGINT; then take the rule away and release what is held; the
    counts."""
    stopping = []
    # a signal wakes the select below (a handler alone would let it sleep on: PEP 475)
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.append(True))
    delayed = 0
    waited = 0.0
    while not stopping:
        release = schedule.next_release()
        timeout = None if release is None else max(0.0, release - time.monotonic())
        ready, _, _ = select.select([queue.sock, wake_read], [], [], timeout)
        ready = queue.sock in ready
        if ready:
            arrived = time.monotonic()
            for packet in queue.read():
                waited += schedule.add(packet, arrived) - arrived
                delayed += 1
        last = schedule.due(time.monotonic())
        if last is not None:
            queue.accept_through(last)
    remove_rules()
    for packet in queue.read():  # queued before the rule went
        schedule.add(packet, time.monotonic())
        delayed += 1
    held = len(schedule)
    if held:
        queue.accept_through(schedule.held[-1][1])
    return {
        "packets": delayed,
        "mean_delay_ms": round(1000 * waited / delayed, 3) if delayed else 0.0,
        "most_held": schedule.most_held,
        "released_at_stop": held,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--remove", action="store_true", help="only remove a rule a program before left")
    parser.add_argument("--queue", type=int, default=7, help="the NFQUEUE queue number the rule sends to")
    parser.add_argument("--delay-ms", type=float, help="delay added to every packet, ms")
    parser.add_argument("--interface", help="the interface whose arriving packets are delayed")
    parser.add_argument("--source", help="only packets from this network (CIDR) are delayed")
    parser.add_argument("--skip-port", type=int, action="append", default=[], help="TCP ports never delayed")
    parser.add_argument(
        "--on-send",
        action="store_true",
        help="delay what leaves instead (to measure TCP Small Queues' effect)",
    )
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="standard deviation of the delay, ms")
    parser.add_argument(
        "--max-held", type=int, default=65536, help="packets the kernel queues before it drops"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the jitter (default: from the OS)")
    args = parser.parse_args(argv)
    if args.remove:
        print(f"testbed-link-delay: {'removed' if remove_rules() else 'found no'} chain {CHAIN}")
        return 0
    if None in (args.delay_ms, args.interface, args.source):
        parser.error("--delay-ms, --interface and --source are needed (or --remove)")
    if args.delay_ms < 0 or args.jitter_ms < 0 or not 0 <= args.queue <= 65535:
        parser.error("--delay-ms and --jitter-ms must be >= 0 and --queue within 0-65535")
    queue = Queue(args.queue, args.max_held)
    schedule = Schedule(args.delay_ms / 1000, args.jitter_ms / 1000, random.Random(args.seed))
    try:
        add_rules(rules(args.queue, args.interface, args.source, args.skip_port, args.on_send))
    except OSError as error:
        print(f"testbed-link-delay: {error}", file=sys.stderr)
        return 1
    notify_ready()
    print(
        f"testbed-link-delay: queue {args.queue}, delay {args.delay_ms} ms, jitter {args.jitter_ms} ms",
        flush=True,
    )
    counts = run(queue, schedule)
    queue.unbind()
    print("testbed-link-delay: " + " ".join(f"{key}={value}" for key, value in counts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
