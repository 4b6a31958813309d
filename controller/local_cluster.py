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


def testbed_inspected_containers(lines) -> dict[str, dict]:
    """`podman inspect --format '{{json .Name}} {{json .State.Running}} {{.HostConfig.CpuQuota}}
    {{.HostConfig.CpuPeriod}} {{.HostConfig.Memory}}'` lines, by name.

    >>> testbed_inspected_containers(['"testbed-peer-01" true 87500 100000 3221225472'])
    {'testbed-peer-01': {'running': True, 'cpus': 0.875, 'memory_mb': 3072}}
    """
    containers = {}
    for line in lines:
        name, running, quota, period, memory = line.split()
        cpus = int(quota) / int(period) if int(quota) > 0 and int(period) > 0 else 0.0
        containers[json.loads(name)] = {
            "running": json.loads(running),
            "cpus": round(cpus, 3),
            "memory_mb": int(memory) // (1024 * 1024),
        }
    return containers
