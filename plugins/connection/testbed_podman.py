"""The local cluster's connection: containers.podman.podman with pipelining, each module run entered with
nsenter instead of `podman exec`.

The collection's podman connection runs every task in five or six `podman exec` calls (home directory,
temporary directory, chmod, the module, clean-up) after a `podman mount`. With pipelining a module is sent on
the standard input of a single command. That command is not `podman exec` either: each `podman exec` costs
about 0.1 s of CPU (the podman client, conmon, the runtime's exec) and 0.13 s of latency, against under 0.01 s
for `nsenter`, and a cluster's run has thousands of tasks (docs/run-overhead.md). The command
enters the container as `podman exec` does:

- every namespace of the container's first process (`nsenter --all`);
- the container's cgroup in every hierarchy (its CPU and memory limits, its accounting);
- the container's environment, capabilities (`setpriv --bounding-set`, run inside the container) and
  resource limits.

What podman knows of the container (its process, cgroup, environment, capabilities, limits) is read once with
`podman container inspect` and kept in a file of the controller's, checked before each use against the
container's first process (still the container's init, still in its cgroup). A stopped or missing container,
or a task run as another user, goes through `podman exec` as before, with podman's own errors. Files are
copied through the container's root (/proc/PID/root), which sees its mounts (/tmp and /run are its own).
benchmarks/connection_overhead.py measures this connection against the collection's on the same tasks.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.utils.display import Display
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: testbed_podman
short_description: Run tasks in the local cluster's podman containers, with pipelining
description:
  - containers.podman.podman, plus pipelining (one command per module), each module entered with nsenter into
    the container's namespaces and cgroup, with its environment, capabilities and limits.
  - Falls back to C(podman exec) for a stopped container or a task run as another user than root.
author: testbed
options:
  remote_addr:
    description: The container's name.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
  remote_user:
    description: The user inside the container (the image's by default).
    vars:
      - name: ansible_user
  podman_executable:
    description: The podman binary.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  podman_extra_args:
    description: Extra arguments for every podman call.
    default: ""
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
extends_documentation_fragment:
  - connection_pipelining
"""

display = Display()

#: what podman knows of each container, one JSON file per container name (checked before each use)
CACHE = Path(tempfile.gettempdir()) / f"testbed-podman-{os.getuid()}"
_RLIMITS = {f"RLIMIT_{n}": getattr(resource, f"RLIMIT_{n}") for n in ("NOFILE", "NPROC", "CORE", "MEMLOCK")}


@dataclass(frozen=True)
class Target:
    """A running container as nsenter enters it."""

    id: str
    pid: int
    cgroup: str  # the container's cgroup path, the same in every hierarchy (podman's cgroupfs manager)
    env: dict[str, str]
    capabilities: list[str]  # setpriv's names: chown, net_admin, ...
    limits: list[tuple[str, int, int]]

    @classmethod
    def from_inspect(cls, data: dict) -> Target | None:
        state = data.get("State") or {}
        caps = data.get("EffectiveCaps")
        if not (state.get("Running") and state.get("Pid") and state.get("CgroupPath") and caps):
            return None
        env = dict(item.split("=", 1) for item in (data.get("Config") or {}).get("Env") or [] if "=" in item)
        limits = [
            (u["Name"], int(u["Soft"]), int(u["Hard"]))
            for u in (data.get("HostConfig") or {}).get("Ulimits") or []
            if u.get("Name") in _RLIMITS
        ]
        names = [c.lower().removeprefix("cap_") for c in caps]
        return cls(data["Id"], int(state["Pid"]), state["CgroupPath"], env, names, limits)

    def alive(self) -> bool:
        """The container's init is still this process: the first of its PID namespace, in its cgroup."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
            cgroups = Path(f"/proc/{self.pid}/cgroup").read_text()
        except OSError:
            return False
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        return bool(nspid) and nspid[-1] == "1" and self.id in cgroups


def _cgroup_mounts() -> list[str]:
    """The controller's cgroup hierarchies (v1 controllers, name=systemd, the unified one)."""
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            separator = fields.index("-")
            if fields[separator + 1] in ("cgroup", "cgroup2"):
                mounts.append(fields[4])
    return mounts


class Connection(PodmanConnection):
    transport = "testbed_podman"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mount_tried = False
        self._target: Target | None = None
        self._nsenter = shutil.which("nsenter")

    def _connect(self):
        # nothing to set up: no session to open; the mount waits for a file transfer that needs it
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mount(self):
        if not self._mount_tried:
            self._mount_tried = True
            super()._connect()  # podman mount (falls back to podman cp where it fails)

    def _entered(self) -> Target | None:
        """The container to enter with nsenter, or None where `podman exec` has to do it."""
        if self.user not in (None, "", "root") or not self._nsenter or os.geteuid() != 0:
            return None
        if self._target and self._target.alive():
            return self._target
        cached = CACHE / f"{self._container_id}.json"
        try:
            target = Target(**json.loads(cached.read_text()))
            if target.alive():
                self._target = target
                return target
        except (OSError, ValueError, TypeError):
            pass
        rc, stdout, stderr = self._podman(["container", "inspect"])
        if rc != 0:
            return None
        try:
            target = Target.from_inspect(json.loads(stdout)[0])
        except (ValueError, IndexError, KeyError, TypeError):
            return None
        if target is None or not target.alive():
            return None
        CACHE.mkdir(mode=0o700, exist_ok=True)
        written = cached.with_name(f".{cached.name}.{os.getpid()}")
        written.write_text(json.dumps(target.__dict__))
        written.replace(cached)
        self._target = target
        return target

    def _enter(self, target: Target, args: list[str], in_data: bytes | None):
        """Run args inside the container as `podman exec` would; None where it could not be started."""
        procs = [f"{mount}{target.cgroup}/cgroup.procs" for mount in _cgroup_mounts()]
        procs = [path for path in procs if os.path.exists(path)]

        def join() -> None:  # in the child, before nsenter: the container's cgroups and limits
            pid = str(os.getpid())
            for path in procs:
                with open(path, "w") as handle:
                    handle.write(pid)
            for name, soft, hard in target.limits:
                resource.setrlimit(_RLIMITS[name], (soft, hard))

        command = [self._nsenter, f"--target={target.pid}", "--all", "--",
                   "setpriv", "--bounding-set=-all," + ",".join(f"+{c}" for c in target.capabilities),
                   "--", *args]  # fmt: skip
        display.vvv(f"NSENTER {command}", host=self._container_id)
        try:
            process = subprocess.Popen(
                [to_bytes(a, errors="surrogate_or_strict") for a in command],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=target.env, cwd="/", preexec_fn=join,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as error:
            display.vvv(f"nsenter failed ({error}), using podman exec", host=self._container_id)
            return None
        stdout, stderr = process.communicate(input=in_data)
        return process.returncode, stdout, stderr

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        target = self._entered()
        if target is not None:
            done = self._enter(target, args, in_data)
            if done is not None:
                return done
        command = ["exec", *(("--interactive",) if in_data is not None else ())]
        return self._podman([*command, *(("--user", self.user) if self.user else ())], args, in_data)

    def _in_root(self, path) -> bytes | None:
        """The container's path as seen from the controller, through its init's root."""
        target = self._entered()
        if target is None:
            return None
        return f"/proc/{target.pid}/root".encode() + to_bytes(path, errors="surrogate_or_strict")

    def put_file(self, in_path, out_path):
        ConnectionBase.put_file(self, in_path, out_path)
        inside = self._in_root(out_path)
        if inside is None:
            self._mount()
            return super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._container_id)
        shutil.copyfile(to_bytes(in_path, errors="surrogate_or_strict"), inside)

    def fetch_file(self, in_path, out_path):
        ConnectionBase.fetch_file(self, in_path, out_path)
        inside = self._in_root(in_path)
        if inside is None:
            self._mount()
            return super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._container_id)
        shutil.copyfile(inside, to_bytes(out_path, errors="surrogate_or_strict"))
