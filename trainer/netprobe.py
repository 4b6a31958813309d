"""Measures the TCP throughput between two peers (the bandwidth B of the report's averaging bound).

One stream, like one pair of peers in an all-reduce: ``serve`` accepts one connection, counts the bytes until
the sender closes, and answers with the count; ``send`` streams for ``--seconds`` and reports bytes over the
time until the server confirmed receiving them all (so bytes still in buffers are not counted as sent). Prints
one JSON line: ``{"bytes": ..., "seconds": ..., "bytes_per_second": ...}``.

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


def serve(bind: str, port: int, timeout: float) -> int:
    """Accept one sender, count what it sends, answer with the count; returns the count."""
    with socket.create_server((bind, port)) as server:
        server.settimeout(timeout)
        connection, _ = server.accept()
        with connection:
            connection.settimeout(timeout)
            received, buffer = 0, bytearray(CHUNK)
            while count := connection.recv_into(buffer):
                received += count
            connection.sendall(str(received).encode().ljust(ANSWER))
    return received


def send(host: str, port: int, seconds: float, connect_timeout: float = 30.0) -> dict[str, float]:
    """Stream to a server for `seconds`; the throughput is what the server confirmed receiving."""
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
    with connection:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while len(answer) < ANSWER and (part := connection.recv(ANSWER - len(answer))):
            answer += part
        elapsed = time.perf_counter() - started
    received = int(answer.decode().strip())
    return {"bytes": received, "seconds": elapsed, "bytes_per_second": received / elapsed}


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


def main(args: argparse.Namespace) -> int:
    if args.probe == "serve":
        print(json.dumps({"bytes": serve(args.bind, args.port, args.timeout)}))
        return 0
    if args.seconds <= 0:
        print("trainer: error: --seconds must be positive", file=sys.stderr)
        return 2
    print(json.dumps(send(args.host, args.port, args.seconds)))
    return 0
