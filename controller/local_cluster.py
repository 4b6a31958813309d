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
    each was created with, and ``spec``, the label that local-cluster.yml gave it at its creation (what it was
    created from, limits aside: a running container of this run's spec is left as it is).

    >>> testbed_inspected_containers(json.dumps([{"Name": "testbed-peer-01", "State": {"Running": True},
    ...     "HostConfig": {"CpuQuota": 87500, "CpuPeriod": 100000, "Memory": 3221225472},
    ...     "Config": {"Labels": {"testbed.spec": "9f2c"}}}]))
    {'testbed-peer-01': {'running': True, 'cpus': 0.875, 'memory_mb': 3072, 'spec': '9f2c'}}
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
        }
    return containers


def testbed_limits_changed(wanted, containers, sizes, prefix) -> list[str]:
    """The wanted hosts whose container this run creates or gives other limits than it was created with (a
    container's creation values are all podman 4.3 shows: the limits a run set in place are not).

    >>> containers = {"t-peer-01": {"cpus": 0.875, "memory_mb": 3072}}
    >>> sizes = {"peer-01": {"cpus_limit": 0.875, "memory_mb": 3072}}
    >>> sizes["peer-02"] = {"cpus_limit": 1.0, "memory_mb": 2048}
    >>> testbed_limits_changed(["peer-01", "peer-02"], containers, sizes, "t-")
    ['peer-02']
    """
    changed = []
    for host in wanted:
        found, size = containers.get(prefix + host), sizes[host]
        if found is None or (found["cpus"], found["memory_mb"]) != (size["cpus_limit"], size["memory_mb"]):
            changed.append(host)
    return changed
