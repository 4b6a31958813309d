#!/usr/bin/env python3
"""Runs one host's planned faults against its trainer while the experiment goes on (role fault_injection).

Started in the background before the trainer; waits for the start barrier's release (the trainer writes its
time to started.json at that moment, before its first step), then at each fault's time applies it and,
after its duration, heals it; a fault due after the trainer ended is skipped. Stopped (SIGTERM: the run is
over), it heals the fault under way and records every fault still due as skipped. Writes the timeline
(planned and actual times, Unix and from the start) to --timeline after every change, so a record survives
whatever happens next. Standard library only: it runs with the host's python3.

Faults: kill (SIGKILL every process of the unit), pause (SIGSTOP, later SIGCONT), partition (blackhole routes
to the other peers' addresses: nothing the peer sends reaches them, so no connection with them works), slow
(the interface's root qdisc replaced by tbf at the rate; the qdisc before it restored at the end), restart
(SIGKILL, and after the downtime the unit started again: the agent writes rejoin.json beside started.json
first, which tells the trainer to rejoin the running collaboration and append to its results, and keeps the
killed incarnation's trainer.log as trainer.<incarnation>.log), cross (a bulk TCP flow to another host at a
rate for the window: an iperf3 client, whose achieved rate and bytes are recorded at the end; the target
host's agent serves iperf3 on the same port, --serve-cross-traffic, for as long as it runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_SECONDS = 0.2


def sh(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


REJOIN_FILE = "rejoin.json"  # the trainer's contract: experiment/results.py REJOIN_FILE


class Host:
    """The trainer's unit, its results directory and the host's cluster interface."""

    def __init__(self, unit: str, address: str, peers: list[str], results_dir: Path):
        self.unit, self.address, self.peers, self.results_dir = unit, address, peers, results_dir
        self.seen_active = False
        self._saved_qdisc: str | None = None
        self.incarnation = 1
        self.cross_port = 0
        self._flow: subprocess.Popen | None = None

    def active(self) -> bool:
        state = subprocess.run(
            ["systemctl", "is-active", self.unit], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.seen_active = self.seen_active or state in ("active", "activating")
        return state in ("active", "activating", "deactivating")

    def ended(self) -> bool:
        return self.seen_active and not self.active()

    def signal(self, name: str) -> None:
        sh("systemctl", "kill", "--kill-whom=all", f"--signal={name}", self.unit)

    def restart(self, killed_at: float) -> None:
        """Start the killed trainer again, as a rejoining incarnation (see the module docstring)."""
        log = self.results_dir / "trainer.log"
        if log.exists():
            os.replace(log, self.results_dir / f"trainer.{self.incarnation}.log")
        self.incarnation += 1
        document = {"incarnation": self.incarnation, "killed_at": killed_at, "restarted_at": time.time()}
        tmp = self.results_dir / (REJOIN_FILE + ".tmp")
        tmp.write_text(json.dumps(document) + "\n")
        os.replace(tmp, self.results_dir / REJOIN_FILE)
        sh("systemctl", "start", self.unit)

    def interface(self) -> str:
        fields = sh("ip", "-o", "-4", "addr", "show", "to", self.address).split()
        if len(fields) < 2:
            raise RuntimeError(f"no interface carries {self.address}")
        return fields[1].split("@")[0]

    def partition(self, on: bool) -> None:
        for peer in self.peers:
            if on:
                sh("ip", "route", "replace", "blackhole", f"{peer}/32")
            else:
                subprocess.run(["ip", "route", "del", f"{peer}/32"], capture_output=True, check=False)

    @staticmethod
    def _tbf(interface: str, rate: str, burst: str, latency: str, leaf: bool = False) -> None:
        """tbf at the root, or (``leaf``) as the leaf of role link_shaping's class 1:10."""
        where = ["parent", "1:10", "handle", "10:"] if leaf else ["root"]
        sh(
            "tc",
            "qdisc",
            "replace",
            "dev",
            interface,
            *where,
            "tbf",
            "rate",
            rate,
            "burst",
            burst,
            "latency",
            latency,
        )

    def slow(self, rate_mbit: float | None) -> None:
        """Cap egress at rate_mbit (None: restore what was found before). Where role link_shaping shaped
        the link (htb at the root, the cluster's traffic through class 1:10), only that class's leaf changes,
        so the controller's SSH stays unshaped; elsewhere the root qdisc becomes tbf."""
        interface = self.interface()
        if rate_mbit is not None:
            self._saved_qdisc = sh("tc", "qdisc", "show", "dev", interface).strip()
            burst = max(int(rate_mbit * 1250), 16000)  # 10 ms of the rate, as role link_shaping
            self._tbf(interface, f"{rate_mbit}mbit", str(burst), "100ms", self._shaped_class())
            return
        shaped_class = self._shaped_class()
        saved = re.search(
            r"\btbf\b.*?\brate (\S+) burst (\S+) lat (\S+)", self._saved_qdisc or "", flags=re.DOTALL
        )
        if saved:
            self._tbf(interface, *saved.groups(), shaped_class)
        elif shaped_class:
            subprocess.run(
                ["tc", "qdisc", "del", "dev", interface, "parent", "1:10"], capture_output=True, check=False
            )
        else:
            subprocess.run(["tc", "qdisc", "del", "dev", interface, "root"], capture_output=True, check=False)

    def start_flow(self, fault: dict) -> None:
        """A cross-traffic window's flow: an iperf3 client to its target at its rate, for its duration."""
        seconds = max(1, math.ceil(fault["duration_seconds"]))
        self._flow = subprocess.Popen(
            ["iperf3", "--client", fault["target_address"], "--port", str(self.cross_port),
             "--time", str(seconds), "--bitrate", f"{fault['rate_mbit']:.6g}M", "--json",
             "--connect-timeout", "5000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def finish_flow(self, fault: dict) -> dict:
        """Wait for the window's flow to end (at most 10 s past its planned end); what it achieved."""
        flow, self._flow = self._flow, None
        if flow is None:
            raise RuntimeError("no flow was started")
        planned_end = fault["applied_at"] + fault["duration_seconds"]
        try:
            out, err = flow.communicate(timeout=max(0.0, planned_end - time.time()) + 10)
        except subprocess.TimeoutExpired:
            flow.kill()
            out, err = flow.communicate()
        try:
            report = json.loads(out)
        except ValueError:
            report = {}
        if report.get("error") or flow.returncode != 0:
            raise RuntimeError(f"iperf3: {report.get('error') or err.strip() or flow.returncode}")
        sent = report["end"]["sum_sent"]
        return {"sent_bytes": int(sent["bytes"]), "achieved_mbit": round(sent["bits_per_second"] / 1e6, 3)}

    def end_flow(self) -> None:
        """Kill a cross-traffic flow still running (the agent is stopped)."""
        if self._flow is not None and self._flow.poll() is None:
            self._flow.kill()

    def _shaped_class(self) -> bool:
        """Whether the saved qdiscs are role link_shaping's htb (class 1:10 carries the cluster's traffic)."""
        return bool(re.search(r"qdisc htb 1: root", self._saved_qdisc or ""))


def barrier_release(started_json: Path, not_before: float) -> float | None:
    """Unix time this run's start barrier released (not before ``not_before``: an earlier run's file does not
    count), None until the trainer has written it."""
    try:
        released = float(json.loads(started_json.read_text())["barrier_released_at"])
    except (OSError, ValueError, KeyError, TypeError):  # not there yet, or being replaced
        return None
    return released if released >= not_before else None


class Timeline:
    def __init__(self, path: Path, faults: list[dict]):
        self.path = path
        self.document = {"started": None, "faults": [dict(f, status="planned") for f in faults]}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.document, indent=2) + "\n")
        os.replace(tmp, self.path)

    def note(self, entry: dict, **fields) -> None:
        entry.update(fields)
        self.save()


def wait_until(moment: float, host: Host) -> bool:
    """Sleep until ``moment`` (Unix); False when the trainer ended first."""
    while time.time() < moment:
        if host.ended():
            return False
        time.sleep(min(POLL_SECONDS, max(0.0, moment - time.time())))
    return True


def apply(fault: dict, host: Host, on: bool) -> None:
    kind = fault["kind"]
    if kind == "kill" or (kind == "restart" and on):
        host.signal("SIGKILL")
    elif kind == "restart":
        host.restart(fault["applied_at"])
    elif kind == "pause":
        host.signal("SIGSTOP" if on else "SIGCONT")
    elif kind == "partition":
        host.partition(on)
    elif kind == "slow":
        host.slow(fault["rate_mbit"] if on else None)
    elif kind == "cross" and on:
        host.start_flow(fault)
    elif kind == "cross":
        fault.update(host.finish_flow(fault))


class Stopped(SystemExit):
    """SIGTERM: the run is over (role fault_injection's collect), or the agent is ended."""

    def __init__(self) -> None:
        super().__init__(143)


class StopRequest:
    """A stop (SIGTERM) held while a fault takes effect and is recorded: one that came between the fault's
    effect and the block that heals it would leave it on (a partition after the run). The handler runs in the
    main thread whichever thread the signal reached."""

    held = False
    requested = False

    @classmethod
    def hold(cls) -> None:
        cls.held = True

    @classmethod
    def release(cls) -> None:
        """Stop now if a stop came while held."""
        cls.held = False
        if cls.requested:
            raise Stopped


def _stop(*_: object) -> None:
    if StopRequest.held:
        StopRequest.requested = True
        return
    raise Stopped


def run(args: argparse.Namespace) -> int:
    faults = sorted(json.loads(args.faults), key=lambda f: f["at_seconds"])
    started_json = Path(args.started)
    host = Host(args.unit, args.address, [p for p in args.peers.split(",") if p], started_json.parent)
    # a release counts from here on; the timeline written next tells the role the agent is watching
    launched = time.time()
    host.cross_port = args.cross_traffic_port
    timeline = Timeline(Path(args.timeline), faults)
    timeline.save()
    # the target of another host's cross traffic: its iperf3 server, for as long as the agent runs
    server = None
    if args.serve_cross_traffic:
        server = subprocess.Popen(
            ["iperf3", "--server", "--bind", args.address, "--port", str(args.cross_traffic_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        done = _inject(args, host, started_json, timeline, launched)
        # a target serves until its trainer ends (or the collect step stops the agent)
        while server is not None and not host.ended() and time.time() < launched + args.timeout:
            time.sleep(POLL_SECONDS)
        return done
    except Stopped:
        for entry in [f for f in timeline.document["faults"] if f["status"] == "planned"]:
            timeline.note(entry, status="skipped", detail="the run was over before the fault was due")
        return 0
    finally:
        host.end_flow()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


def _inject(
    args: argparse.Namespace, host: Host, started_json: Path, timeline: Timeline, launched: float
) -> int:
    deadline = launched + args.timeout
    for entry in [f for f in timeline.document["faults"] if f.get("before_start")]:
        # kill@start: as soon as the trainer runs, before the start barrier can release
        while not host.active() and time.time() < deadline:
            time.sleep(POLL_SECONDS)
        try:
            apply(entry, host, on=True)
            timeline.note(entry, status="applied", applied_at=time.time(), applied_seconds=None)
        except RuntimeError as exc:
            timeline.note(entry, status="failed", detail=str(exc))
    start = None
    while start is None and time.time() < deadline and not host.ended():
        start = barrier_release(started_json, launched)
        if start is None:
            time.sleep(POLL_SECONDS)
    if start is None:
        for entry in [f for f in timeline.document["faults"] if f["status"] == "planned"]:
            timeline.note(entry, status="skipped", detail="the trainer's start barrier never released")
        return 0
    timeline.note(timeline.document, started=start)
    for entry in [f for f in timeline.document["faults"] if not f.get("before_start")]:
        due = wait_until(start + entry["at_seconds"], host)
        # a kill (or restart) of a trainer that is not running has nothing to kill: the run is over
        if not due or (entry["kind"] in ("kill", "restart") and not host.active()):
            timeline.note(entry, status="skipped", detail="the trainer had ended before the fault was due")
            continue
        applied = time.time()
        StopRequest.hold()  # until the fault is applied, recorded and inside the block that heals it
        try:
            apply(entry, host, on=True)
        except RuntimeError as exc:
            timeline.note(entry, status="failed", detail=str(exc), applied_at=applied)
            StopRequest.release()
            continue
        timeline.note(entry, status="applied", applied_at=applied, applied_seconds=round(applied - start, 3))
        if entry["duration_seconds"] is None:
            StopRequest.release()
            continue
        heal_at = start + entry["at_seconds"] + entry["duration_seconds"]
        try:  # healed even when the agent is stopped meanwhile (SIGTERM: see main)
            StopRequest.release()
            if entry["kind"] == "restart":  # the trainer is down on purpose: the whole downtime
                time.sleep(max(0.0, heal_at - time.time()))
            else:
                wait_until(heal_at, host)
        finally:
            heal(entry, host, timeline, start)
    return 0


def heal(entry: dict, host: Host, timeline: Timeline, start: float) -> None:
    try:
        apply(entry, host, on=False)
    except RuntimeError as exc:
        timeline.note(entry, status="failed", detail=f"heal: {exc}")
        return
    healed = time.time()
    timeline.note(entry, status="healed", healed_at=healed, healed_seconds=round(healed - start, 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", required=True, help="JSON list of this host's faults (validate.yml)")
    parser.add_argument("--started", required=True, help="the trainer's started.json (the barrier's release)")
    parser.add_argument("--unit", default="testbed-trainer.service")
    parser.add_argument("--address", required=True, help="this host's cluster address (its interface)")
    parser.add_argument("--peers", default="", help="the other peers' cluster addresses, comma-separated")
    parser.add_argument("--timeline", required=True)
    parser.add_argument("--timeout", type=float, required=True, help="give up waiting after this many s")
    parser.add_argument("--cross-traffic-port", type=int, default=5202, help="iperf3's port (cross traffic)")
    parser.add_argument(
        "--serve-cross-traffic",
        type=lambda text: text == "true",
        default=False,
        help="true: serve iperf3 (another host sends cross traffic here)",
    )
    signal.signal(signal.SIGTERM, _stop)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
