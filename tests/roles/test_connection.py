"""The local cluster's connection (plugins/connection/testbed_podman.py) enters a container as `podman exec`
does: the same namespaces, cgroups, capabilities, resource limits and environment; files copied in and
fetched through the container's own view; a restarted container found again; a stopped one fails with
podman's error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = "localhost/testbed-base:bookworm"
NAME = "tb-conntest-1"
# what a process inside sees of where it runs
PROBE = (
    "cat /proc/self/cgroup; grep -E '^Cap(Inh|Prm|Eff|Bnd)' /proc/self/status; ulimit -n; ulimit -u;"
    " echo probe=$TESTBED_PROBE home=$HOME path=$PATH; readlink /proc/self/ns/mnt /proc/self/ns/net"
    " /proc/self/ns/pid /proc/self/ns/uts /proc/self/ns/ipc; readlink /proc/1/ns/mnt"
)


def _env() -> dict[str, str]:
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "images" / "containers.conf"))
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "true"  # the json callback for ad-hoc `ansible` too
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=_env(), capture_output=True, text=True, check=check)


def _ansible(tmp_path: Path, module: str, arguments: str) -> dict:
    """One ad-hoc task on the container through testbed_podman; its result."""
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps({"all": {"hosts": {NAME: {"ansible_python_interpreter": "/usr/bin/python3"}}}})
    )
    command = [str(BIN / "ansible"), "all", "-i", str(inventory), "-c", "testbed_podman", "-m", module]
    run = subprocess.run([*command, "-a", arguments], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    start = run.stdout.find("{")
    assert start >= 0, run.stdout + run.stderr
    return json.loads(run.stdout[start:])["plays"][0]["tasks"][0]["hosts"][NAME]


@pytest.fixture
def container():
    _podman("rm", "--force", "--time", "0", NAME, check=False)
    # this machine's root lacks CAP_SYS_RESOURCE: limits within its own (images/containers.conf)
    limits = ("--ulimit", "nofile=12345:12345", "--ulimit", "nproc=8192:8192")
    options = ("--systemd=always", "--cap-add", "NET_ADMIN", "--cpus", "0.5", *limits)
    _podman(
        "run",
        "--detach",
        "--name",
        NAME,
        *options,
        "--env",
        "TESTBED_PROBE=inside",
        IMAGE,
        "/lib/systemd/systemd",
    )
    yield NAME
    _podman("rm", "--force", "--time", "0", NAME, check=False)


@pytest.mark.slow
@pytest.mark.load_tolerant  # compares what two ways of entering see, times nothing
def test_a_module_runs_where_podman_exec_runs_it(container, tmp_path):
    entered = _ansible(tmp_path, "ansible.builtin.shell", PROBE)
    assert entered["rc"] == 0, entered
    execed = _podman("exec", container, "sh", "-c", PROBE).stdout.splitlines()
    lines = entered["stdout"].splitlines()
    # the same cgroups (the container's CPU quota and memory limit), capabilities, limits and environment
    assert lines[:-6] == execed[:-6], (lines, execed)
    assert any("/libpod-" in line for line in lines if ":cpu:" in line or ":cpu," in line), lines
    assert "probe=inside home=/root" in entered["stdout"]
    assert "12345" in lines, lines
    # the container's namespaces: the same as its init's (and as podman exec's)
    assert lines[-6:-1] == execed[-6:-1] and lines[-6] == lines[-1], (lines[-6:], execed[-6:])

    # a file copied in lands where the container sees it (its own /tmp), and comes back out
    copied = _ansible(tmp_path, "ansible.builtin.copy", "content=across dest=/tmp/across.txt")
    assert copied.get("changed") is True, copied
    assert _podman("exec", container, "cat", "/tmp/across.txt").stdout == "across"
    fetched = _ansible(
        tmp_path, "ansible.builtin.fetch", f"src=/tmp/across.txt dest={tmp_path}/out/ flat=true"
    )
    assert not fetched.get("failed"), fetched
    assert (tmp_path / "out" / "across.txt").read_text() == "across"

    # restarted: a new init process, found again (the cached one is checked before each use). Once it has
    # booted: on a loaded host (make test's second lane) a module that ran while the container's systemd was
    # still booting failed once (rc 1), as on any host still coming up
    _podman("restart", "--time", "0", container)
    _podman("exec", container, "timeout", "60", "systemctl", "is-system-running", "--wait", check=False)
    again = _ansible(tmp_path, "ansible.builtin.command", "readlink /proc/self/ns/pid")
    assert again["rc"] == 0, again
    assert again["stdout"] == _podman("exec", container, "readlink", "/proc/1/ns/pid").stdout.strip(), again

    # stopped: podman's own error, not a hang or a module run somewhere else
    _podman("stop", "--time", "0", container)
    stopped = _ansible(tmp_path, "ansible.builtin.command", "true")
    assert stopped.get("failed") is True, stopped
    assert "can only create exec sessions on running containers" in stopped.get("module_stderr", ""), stopped
