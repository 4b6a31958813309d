"""Measures the round trip and the TCP throughput between two peers (the delay and the bandwidth B of the
report's averaging bound).

One connection, like one pair of peers in an all-reduce. First ``--pings`` round trips of one byte each (the
sender names their number in its first byte; the server echoes each): their times are the link's round trip
as a small message of the protocol sees it. Then one stream: ``serve`` counts the bytes until the sender
closes and answers with the count; ``send`` streams for ``--seconds`` and reports bytes over the time until
the server confirmed receiving them all (so bytes still in buffers are not counted as sent). Prints one JSON
line:
``{"bytes": ..., "seconds": ..., "bytes_per_second": ..., "round_trip_ms": [...]}``.

    trainer netprobe serve --bind 10.0.0.1 --port 5201
    trainer netprobe send --to 10.0.0.1 --port 5201 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

CHUNK = 1 << 20
ANSWER = 32  # bytes of the server's answer (the received count, ASCII, space-padded)
MAX_PINGS = 255  # the count travels in one byte


def serve(bind: str, port: int, timeout: float) -> int:
    """Accept one sender, count what it sends, answer with the count; returns the count."""
    with socket.create_server((bind, port)) as server:
        server.settimeout(timeout)
        connection, _ = server.accept()
        with connection:
            connection.settimeout(timeout)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pings = _exactly(connection, 1)[0]
            for _ in range(pings):
                connection.sendall(_exactly(connection, 1))
            received, buffer = 0, bytearray(CHUNK)
            while count := connection.recv_into(buffer):
                received += count
            connection.sendall(str(received).encode().ljust(ANSWER))
    return received


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = connection.recv(size - len(data))
        if not part:
            raise ConnectionError("the other end closed the connection during the round trips")
        data += part
    return data


def send(host: str, port: int, seconds: float, pings: int = 10, connect_timeout: float = 30.0) -> dict:
    """Time ``pings`` one-byte round trips, then stream to the server for ``seconds``; the throughput is what
    the server confirmed receiving."""
    deadline = time.monotonic() + connect_timeout
    while True:  # the server may still be starting
        try:
            connection = socket.create_connection((host, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    payload = b"\0" * CHUNK
    round_trips = []
    with connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.sendall(bytes([pings]))
        for _ in range(pings):
            sent = time.perf_counter()
            connection.sendall(b"p")
            _exactly(connection, 1)
            round_trips.append(round(1000 * (time.perf_counter() - sent), 3))
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while len(answer) < ANSWER and (part := connection.recv(ANSWER - len(answer))):
            answer += part
        elapsed = time.perf_counter() - started
    received = int(answer.decode().strip())
    return {
        "bytes": received,
        "seconds": elapsed,
        "bytes_per_second": received / elapsed,
        "round_trip_ms": round_trips,
    }


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``trainer netprobe serve|send`` (trainer/cli.py)."""
    commands = parser.add_subparsers(dest="probe", metavar="serve|send", parser_class=type(parser))
    commands.required = True
    server = commands.add_parser("serve", help="receive one stream and answer with its byte count")
    server.add_argument("--bind", default="0.0.0.0")
    server.add_argument("--port", type=int, default=5201)
    server.add_argument("--timeout", type=float, default=60.0, help="give up after this many idle seconds")
    sender = commands.add_parser("send", help="stream to a server and print the measured throughput")
    sender.add_argument("--to", required=True, dest="host")
    sender.add_argument("--port", type=int, default=5201)
    sender.add_argument("--seconds", type=float, default=3.0)
    sender.add_argument(
        "--pings", type=int, default=10, help=f"one-byte round trips before the stream (0-{MAX_PINGS})"
    )


def main(args: argparse.Namespace) -> int:
    if args.probe == "serve":
        print(json.dumps({"bytes": serve(args.bind, args.port, args.timeout)}))
        return 0
    if args.seconds <= 0 or not 0 <= args.pings <= MAX_PINGS:
        print(f"trainer: error: --seconds must be positive and --pings within 0-{MAX_PINGS}", file=sys.stderr)
        return 2
    print(json.dumps(send(args.host, args.port, args.seconds, args.pings)))
    return 0
