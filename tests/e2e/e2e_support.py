"""Running the experiment playbook against the embedded local cluster (helpers for tests/e2e)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from shared_cluster import BIN, ISOLATED_CLUSTER, REPO, environment


@dataclass
class PlaybookRun:
    returncode: int
    output: str


def _command(playbook: str, extra: tuple[str, ...]) -> list[str]:
    return [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / playbook), *extra]


def run_playbook(playbook: str, *extra: str, timeout: float = 1200, env: dict | None = None) -> PlaybookRun:
    """Run a playbook from playbooks/ with extra arguments (and environment variables); return its exit status
    and combined output."""
    result = subprocess.run(
        _command(playbook, extra),
        cwd=REPO,
        env={**environment(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(result.returncode, result.stdout)


INTERRUPT_PRESSES = 3


def interrupt_playbook(
    playbook: str, *extra: str, at: str, timeout: float = 600, env: dict | None = None
) -> PlaybookRun:
    """Run a playbook and press Ctrl-C (SIGINT to its whole process group, as a terminal does) as soon as its
    output shows ``at``; return its exit status and output. Fails when ``at`` never shows.

    A playbook still running 10 s after a press gets another, as a user would press again (at most
    ``INTERRUPT_PRESSES``): once in a loaded `make test`, ansible-playbook went on to the end
    after the press, its "User interrupted execution" never shown."""
    process = subprocess.Popen(
        _command(playbook, extra),
        cwd=REPO,
        env={**environment(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            lines.append(line)
            if at in line:
                break
            if time.monotonic() > deadline:
                break
        presses = INTERRUPT_PRESSES if lines and at in lines[-1] else 0
        for press in range(presses):
            os.killpg(process.pid, signal.SIGINT)
            try:  # (communicate again after its timeout loses no output)
                lines.append(process.communicate(timeout=10 if press < presses - 1 else 120)[0])
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            lines.append(process.communicate(timeout=120)[0])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = "".join(lines)
    assert at in output, f"the playbook never reached {at!r}:\n{output[-4000:]}"
    return PlaybookRun(process.returncode, output)


#: the e2e runs keep real time unless a test asks for dilation: their time settings were chosen for it (the
#: grid's end-to-end test runs dilated, as a user's run is by default)
UNDILATED = {"time_dilation": "off"}


def extra_vars(**values: object) -> list[str]:
    """``-e`` arguments as one JSON document (keeps types and lists intact), on the tests' own cluster."""
    return ["-e", json.dumps({**ISOLATED_CLUSTER, **UNDILATED, **values})]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


# ------------------------------------------------------------------ a neighbour outside the cluster network
@contextlib.contextmanager
def outside_namespace(network_prefix: str) -> Iterator[list[str]]:
    """A machine on the host's network, as a network namespace whose default route is this host (which
    forwards to the podman network): yields the command prefix that runs a program there. The third octet
    of the scanned cluster's ``network_prefix`` ("10.89.66") names the namespace, its link and its /30
    (10.250.66.0): the local cluster's tests and the stand-in VMs' run at once in `make test`, each with
    its own."""

    def ip(*args: str, check: bool = True) -> None:
        subprocess.run(["ip", *args], check=check, capture_output=True)

    subnet = int(network_prefix.rsplit(".", 1)[1])
    namespace, host_end, inside_end = f"tb-e2e-out{subnet}", f"tbe2e{subnet}h", f"tbe2e{subnet}n"
    host_address, inside_address = f"10.250.{subnet}.1", f"10.250.{subnet}.2"
    ip("netns", "del", namespace, check=False)
    ip("link", "del", host_end, check=False)
    try:
        ip("netns", "add", namespace)
        ip("link", "add", host_end, "type", "veth", "peer", "name", inside_end)
        ip("link", "set", inside_end, "netns", namespace)
        ip("addr", "add", f"{host_address}/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        for command in (
            ["addr", "add", f"{inside_address}/30", "dev", inside_end],
            ["link", "set", inside_end, "up"],
            ["link", "set", "lo", "up"],
            ["route", "add", "default", "via", host_address],
        ):
            ip("netns", "exec", namespace, "ip", *command)
        yield ["ip", "netns", "exec", namespace]
    finally:
        ip("netns", "del", namespace, check=False)
        ip("link", "del", host_end, check=False)


@contextlib.contextmanager
def icmp_unlimited(containers: list[str]) -> Iterator[None]:
    """Lift the containers' ICMP rate limit (Linux answers a closed UDP port with at most one ICMP message a
    second per neighbour) for a scan, so that nmap sees every closed UDP port answered as closed within
    seconds; it changes how fast a closed port says so, not whether a port is open. Restored afterwards."""
    namespaces = []
    for name in containers:
        pid = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", name], env=environment(),
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        namespaces.append(f"--net=/proc/{pid}/ns/net")

    def ratelimit(value: str) -> None:
        for namespace in namespaces:
            subprocess.run(
                ["nsenter", namespace, "sysctl", "-qw", f"net.ipv4.icmp_ratelimit={value}"], check=True
            )

    ratelimit("0")
    try:
        yield
    finally:
        ratelimit("1000")


def port_scan(via: list[str], addresses: list[str], out: Path) -> dict[str, dict[str, str]]:
    """nmap from ``via``: every TCP port (connect scan) and the 100 most common UDP ports of every address.
    Returns {address: {"<port>/<proto>": state}}, the ports nmap counts rather than lists as
    {"<count> more/<proto>": state}, and keeps its output in ``out``."""
    found: dict[str, dict[str, str]] = {}
    scans = {"tcp": ["-sT", "-p-", "-T5"], "udp": ["-sU", "--top-ports", "100", "-T4"]}
    for proto, options in scans.items():
        xml = out / f"nmap-{proto}.xml"
        done = subprocess.run(
            [*via, "nmap", "-Pn", "-n", *options, "-oX", str(xml), "-oN", str(out / f"nmap-{proto}.txt"),
             *addresses],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        for host in ElementTree.parse(xml).getroot().iter("host"):
            address = host.find("address").get("addr")
            ports = found.setdefault(address, {})
            for port in host.iter("port"):
                ports[f"{port.get('portid')}/{port.get('protocol')}"] = port.find("state").get("state")
            for extra in host.iter("extraports"):  # the ports nmap counted rather than listed
                ports[f"{extra.get('count')} more/{proto}"] = extra.get("state")
    return found


# ------------------------------------------------------------------ a site's package proxy
@dataclass
class ProxyLog:
    url: str
    requests: list[str]  # "GET http://..." and "CONNECT host:443", as they came


@contextlib.contextmanager
def forward_proxy(address: str) -> Iterator[ProxyLog]:
    """An HTTP forward proxy on ``address`` (a port of its own), as a site's apt-cacher-ng or squid would be
    to VMs without internet: plain GETs are fetched and passed on whole, CONNECT is tunnelled (https
    sources). Yields its URL and the requests it served, for the test to count."""
    import http.client
    import http.server
    import select
    import threading
    from urllib.parse import urlsplit

    log = ProxyLog("", [])

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # apt keeps its connection to the proxy open

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            log.requests.append(f"{self.command} {self.path}")
            url = urlsplit(self.path)
            if url.scheme != "http" or not url.hostname:
                self.send_error(400, "absolute http:// URL expected")
                return
            upstream = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
            try:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("proxy-connection", "connection")
                }
                upstream.request(
                    self.command, url.path + (f"?{url.query}" if url.query else ""), headers=headers
                )
                answer = upstream.getresponse()
                body = answer.read()
            except OSError as error:
                self.send_error(502, f"upstream: {error}")
                return
            finally:
                upstream.close()
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def do_CONNECT(self) -> None:
            log.requests.append(f"CONNECT {self.path}")
            host, _, port = self.path.rpartition(":")
            try:
                upstream = socket.create_connection((host, int(port)), timeout=60)
            except (OSError, ValueError) as error:
                self.send_error(502, f"upstream: {error}")
                return
            self.send_response(200, "Connection established")
            self.end_headers()
            ends = [self.connection, upstream]
            with upstream:
                while True:
                    readable, _, _ = select.select(ends, [], [], 60)
                    if not readable:
                        break
                    for end in readable:
                        data = end.recv(65536)
                        if not data:
                            self.close_connection = True
                            return
                        (upstream if end is self.connection else self.connection).sendall(data)
            self.close_connection = True

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    log.url = f"http://{address}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield log
    finally:
        server.shutdown()
        server.server_close()
