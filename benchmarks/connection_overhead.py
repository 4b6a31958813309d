"""What a task costs on the local cluster: the collection's podman connection against testbed_podman.

Starts ``--hosts`` containers of the local cluster's image, then runs the same playbook (``--tasks`` rounds of
a command, a stat and a copy on every container) once per connection, ``--repeats`` times alternately, and
prints each run's wall seconds, seconds per task and the machine's CPU seconds per task (every process's,
podman's and the containers' included, from /proc/stat); then the ratios measured in this run: the
collection's connection over testbed_podman (plugins/connection/testbed_podman.py: pipelining, each module
entered with nsenter). Every task's result is checked, so a connection that does less work cannot look
faster.

With ``--settings`` it also runs testbed_podman under the Ansible settings ansible.cfg chose against:
pipelining off, the ``free`` strategy, and half as many forks as hosts; each against ansible.cfg's.

    .venv/bin/python benchmarks/connection_overhead.py --hosts 4 --tasks 4 --repeats 2
    .venv/bin/python benchmarks/connection_overhead.py --hosts 8 --tasks 3 --repeats 3 --settings

Needs podman and ``localhost/testbed-node:latest`` (built by ``make demo`` or the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = "localhost/testbed-node:latest"
CONNECTIONS = ("containers.podman.podman", "testbed_podman")
PREFIX = "tb-connbench-"


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "images" / "containers.conf"))
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=check)


def _playbook(rounds: int) -> list[dict]:
    tasks = []
    for number in range(rounds):
        tasks += [
            {"name": f"command {number}", "ansible.builtin.command": "hostname", "changed_when": False},
            {"name": f"stat {number}", "ansible.builtin.stat": {"path": "/etc/hostname"}},
            {"name": f"copy {number}", "ansible.builtin.copy": {"content": str(number), "dest": "/tmp/b"}},
        ]
    return [{"name": "Connection benchmark", "hosts": "all", "gather_facts": False, "tasks": tasks}]


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (every core; /proc/stat's first line)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _run(
    connection: str, inventory: Path, playbook: Path, hosts: int, tasks: int, settings: dict | None = None
) -> tuple[float, float]:
    """The run's wall seconds and the machine's busy CPU seconds during it."""
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "images" / "containers.conf"))
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    env.update(settings or {})
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    command += ["-e", f"ansible_connection={connection}"]
    started, busy = time.monotonic(), _busy_seconds()
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - started, _busy_seconds() - busy
    if run.returncode != 0:
        raise SystemExit(f"{connection}: ansible-playbook failed\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    stats = json.loads(run.stdout)["stats"]
    ran = [host["ok"] == tasks and host["failures"] == host["unreachable"] == 0 for host in stats.values()]
    if len(ran) != hosts or not all(ran):
        raise SystemExit(f"{connection}: expected {tasks} tasks on {hosts} hosts, got {stats}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4, help="rounds of command + stat + copy")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--settings", action="store_true", help="also Ansible settings against ansible.cfg's")
    args = parser.parse_args()
    names = [f"{PREFIX}{number}" for number in range(1, args.hosts + 1)]
    tasks = 3 * args.tasks
    for name in names:
        _podman("rm", "--force", "--time", "0", name, check=False)
    try:
        for name in names:
            _podman("run", "--detach", "--name", name, "--systemd=always", IMAGE, "/lib/systemd/systemd")
        for name in names:
            _podman("exec", name, "systemctl", "is-system-running", "--wait", check=False)
        with tempfile.TemporaryDirectory() as directory:
            inventory, playbook = Path(directory) / "hosts.json", Path(directory) / "bench.json"
            host_vars = {"ansible_python_interpreter": "/usr/bin/python3"}
            inventory.write_text(json.dumps({"all": {"hosts": dict.fromkeys(names, host_vars)}}))
            playbook.write_text(json.dumps(_playbook(args.tasks)))
            walls: dict[str, list[float]] = {connection: [] for connection in CONNECTIONS}
            cpus: dict[str, list[float]] = {connection: [] for connection in CONNECTIONS}
            print(f"{args.hosts} containers, {tasks} tasks each, {args.repeats} runs per connection")
            print(f"{'connection':<26} {'wall s':>8} {'s/task':>8} {'cpu s/host-task':>15}")
            variants = _variants(args.hosts) if args.settings else {}
            walls.update({name: [] for name in variants})
            cpus.update({name: [] for name in variants})
            # CPU per task per host: one module run
            runs = tasks * args.hosts
            for _ in range(args.repeats):
                runs_of = [(c, c, {}) for c in CONNECTIONS] + [
                    (n, CONNECTIONS[1], s) for n, s in variants.items()
                ]
                for name, connection, settings in runs_of:
                    wall, cpu = _run(connection, inventory, playbook, args.hosts, tasks, settings)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    print(f"{name:<26} {wall:8.1f} {wall / tasks:8.2f} {cpu / runs:15.3f}", flush=True)
    finally:
        for name in names:
            _podman("rm", "--force", "--time", "0", name, check=False)
    medians = {connection: statistics.median(values) for connection, values in walls.items()}
    ratio = medians[CONNECTIONS[0]] / medians[CONNECTIONS[1]]
    print(f"ratio (median wall, {CONNECTIONS[0]} / {CONNECTIONS[1]}): {ratio:.2f}")
    cpu_ratio = statistics.median(cpus[CONNECTIONS[0]]) / statistics.median(cpus[CONNECTIONS[1]])
    print(f"ratio (median CPU, {CONNECTIONS[0]} / {CONNECTIONS[1]}): {cpu_ratio:.2f}")
    for name in walls:
        if name not in CONNECTIONS:
            against = medians[name] / medians[CONNECTIONS[1]]
            print(f"ratio (median wall, {name} / ansible.cfg's): {against:.2f}")


def _variants(hosts: int) -> dict[str, dict[str, str]]:
    """testbed_podman under the settings ansible.cfg does not use (environment overrides)."""
    return {
        "pipelining off": {"ANSIBLE_PIPELINING": "false"},
        "strategy free": {"ANSIBLE_STRATEGY": "free"},
        f"forks {max(1, hosts // 2)}": {"ANSIBLE_FORKS": str(max(1, hosts // 2))},
    }


if __name__ == "__main__":
    main()
