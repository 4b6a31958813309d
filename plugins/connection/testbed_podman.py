"""The local cluster's connection: containers.podman.podman with pipelining.

The collection's podman connection runs every task in five or six `podman exec` calls (home directory,
temporary directory, chmod, the module, clean-up) after a `podman mount`. With pipelining a module is sent on
the standard input of a single `podman exec --interactive`, and the container is mounted only when a task
copies a file. benchmarks/connection_overhead.py measures both connections on the same tasks.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: testbed_podman
short_description: Run tasks in the local cluster's podman containers, with pipelining
description:
  - containers.podman.podman, plus pipelining (one C(podman exec --interactive) per module) and a lazy mount.
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


class Connection(PodmanConnection):
    transport = "testbed_podman"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mount_tried = False

    def _connect(self):
        # nothing to set up: `podman exec` needs no session; the mount waits for the first file transfer
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mount(self):
        if not self._mount_tried:
            self._mount_tried = True
            super()._connect()  # podman mount (falls back to podman cp where it fails)

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        command = ["exec", "--interactive", *(("--user", self.user) if self.user else ())]
        return self._podman(command, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mount()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount()
        super().fetch_file(in_path, out_path)
