"""Helpers of the storage tests: podman containers on a network of their own, ansible-playbook runs, recaps.

Every container and network these tests make is named ``ceph-*`` and removed by the fixture that made it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
# An image with systemd (and ideally the Ceph packages baked in, as the node image has them).
IMAGE = os.environ.get("STORAGE_TEST_IMAGE", "localhost/testbed-node:latest")
RECAP_LINE = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(REPO / "images" / "containers.conf")
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_ROLES_PATH"] = str(REPO / "roles")
    env.update(ANSIBLE_FORCE_COLOR="0", PY_COLORS="0", NO_COLOR="1")
    return env


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *args], env=environment(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def image_exists(image: str = IMAGE) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """Per host: ok, changed, unreachable, failed from the PLAY RECAP."""
        return {
            host: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, counts), strict=True))
            for host, *counts in RECAP_LINE.findall(self.output)
        }


def ansible_playbook(playbook: Path, inventory: Path, *args: str, timeout: float = 900) -> PlaybookRun:
    started = time.monotonic()
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(result.returncode, result.stdout + result.stderr, time.monotonic() - started)


@dataclass
class ContainerCluster:
    """Systemd containers on a podman network of their own, like the local cluster's hosts.

    ``hosts`` maps an inventory name (also the container's name) to (group, last octet of its address)."""

    network: str
    subnet_prefix: str  # e.g. "10.89.70" for 10.89.70.0/24
    hosts: dict[str, tuple[str, int]]
    image: str = IMAGE
    started: list[str] = field(default_factory=list)

    def address(self, name: str) -> str:
        return f"{self.subnet_prefix}.{self.hosts[name][1]}"

    def start(self) -> None:
        self.remove()
        podman("network", "create", "--subnet", f"{self.subnet_prefix}.0/24", self.network)
        for name in self.hosts:
            podman(
                "run", "--detach", "--name", name, "--hostname", name, "--network", self.network,
                "--ip", self.address(name), "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
                "--cpus", "1", "--memory", "2g",
                "--volume", "/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw",
                self.image, "/lib/systemd/systemd",
            )  # fmt: skip
            self.started.append(name)
        for name in self.hosts:
            self.wait_for_systemd(name)

    def wait_for_systemd(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.exec(name, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in {"running", "degraded"}:
                return
            time.sleep(0.5)
        raise TimeoutError(f"systemd in {name} did not come up within {timeout} s")

    def exec(self, name: str, *command: str, check: bool = True, timeout: float = 120):
        return podman("exec", name, *command, check=check, timeout=timeout)

    def shell(self, name: str, script: str, check: bool = True, timeout: float = 120) -> str:
        return self.exec(name, "bash", "-c", script, check=check, timeout=timeout).stdout

    def write_inventory(self, path: Path) -> Path:
        groups: dict[str, list[str]] = {}
        for name, (group, _) in self.hosts.items():
            groups.setdefault(group, []).append(name)
        lines = ["all:", "  vars:", "    ansible_connection: containers.podman.podman", "  children:"]
        for group, names in groups.items():
            lines += [f"    {group}:", "      hosts:"]
            lines += [f"        {name}:\n          cluster_address: {self.address(name)}" for name in names]
        path.write_text("\n".join(lines) + "\n")
        return path

    def container_ids(self) -> list[str]:
        return [podman("inspect", "--format", "{{.Id}}", name).stdout.strip() for name in self.hosts]

    def remove(self) -> None:
        for name in self.hosts:
            podman("rm", "--force", "--time", "5", name, check=False, timeout=60)
        podman("network", "rm", "--force", self.network, check=False)
        self.started.clear()

    def leftovers(self) -> list[str]:
        names = podman("ps", "--all", "--format", "{{.Names}}", check=False).stdout.split()
        found = [f"container {n}" for n in names if n in self.hosts]
        if podman("network", "exists", self.network, check=False).returncode == 0:
            found.append(f"network {self.network}")
        return found
