"""The local cluster's containers (playbooks/local-cluster.yml): the CPU limit and memory this run wants of
each, and what each existing one was created with, so that a changed size is set in place (podman update)
rather than by re-creating the container (docs/run-overhead.md)."""

from __future__ import annotations

import json


def testbed_container_sizes(wanted, plan, hostvars, host_cores) -> dict[str, dict]:
    """Each wanted host's CPU limit and memory: the plan's for a peer, else one core (at most the machine's)
    and the inventory's memory_mb (default 2048).

    >>> testbed_container_sizes(["peer-01", "storage"], {"peer-01": {"cpus_limit": 0.875, "memory_mb": 3072}},
    ...                         {"storage": {}}, "2")
    {'peer-01': {'cpus_limit': 0.875, 'memory_mb': 3072}, 'storage': {'cpus_limit': 1.0, 'memory_mb': 2048}}
    """
    sizes = {}
    for host in wanted:
        planned = (plan or {}).get(host)
        if planned:
            sizes[host] = {"cpus_limit": float(planned["cpus_limit"]), "memory_mb": int(planned["memory_mb"])}
        else:
            memory = int((hostvars.get(host) or {}).get("memory_mb", 2048))
            sizes[host] = {"cpus_limit": min(1.0, float(host_cores)), "memory_mb": memory}
    return sizes


def testbed_inspected_containers(inspected: str) -> dict[str, dict]:
    """`podman inspect` of the existing containers (its JSON), by name: running, the CPUs and memory (MiB)
    each was created with, ``spec``, the label that local-cluster.yml gave it at its creation (what it was
    created from, limits aside: a running container of this run's spec is left as it is), and ``cgroup``, its
    cgroup's path (where the limits it runs with now are read: a run's ``podman update`` is not in the above).

    >>> testbed_inspected_containers(json.dumps([{"Name": "testbed-peer-01", "State": {"Running": True},
    ...     "HostConfig": {"CpuQuota": 87500, "CpuPeriod": 100000, "Memory": 3221225472},
    ...     "Config": {"Labels": {"testbed.spec": "9f2c"}}}]))
    {'testbed-peer-01': {'running': True, 'cpus': 0.875, 'memory_mb': 3072, 'spec': '9f2c', 'cgroup': ''}}
    """
    containers = {}
    for found in json.loads(inspected or "[]"):
        limits = found.get("HostConfig") or {}
        quota, period = int(limits.get("CpuQuota") or 0), int(limits.get("CpuPeriod") or 0)
        containers[found["Name"].lstrip("/")] = {
            "running": bool((found.get("State") or {}).get("Running")),
            "cpus": round(quota / period, 3) if quota > 0 and period > 0 else 0.0,
            "memory_mb": int(limits.get("Memory") or 0) // (1024 * 1024),
            "spec": ((found.get("Config") or {}).get("Labels") or {}).get("testbed.spec", ""),
            "cgroup": (found.get("State") or {}).get("CgroupPath") or "",
        }
    return containers
