"""The controller's own machine: a controller that is not Linux is refused before anything starts, in one
message (controller/plan.py); its cores are read where the system has no affinity (experiment/machine.py)."""

from __future__ import annotations

import os

from controller import plan
from experiment import machine

HOSTS = ["peer-01", "peer-02"]
SIZE = {"cluster_address": "10.0.0.1", "vcpus": 2, "memory_mb": 2048}


def inventory(system: str) -> dict:
    return {
        "peers": HOSTS,
        "local": False,
        "host_cores": 8,
        "hostvars": dict.fromkeys(HOSTS, SIZE),
        "machine": {"cores": 8, "cpu_model": "x", "torch": "2.14.1", "system": system},
    }


def test_a_controller_that_is_not_linux_is_refused_first_and_once():
    raw = {"peers": "2", "model": "smallcnn", "strategy": "ring"}
    result = plan.testbed_experiment(raw, inventory("Darwin"))
    assert result["errors"][0].startswith(
        "the controller (the machine that runs ansible-playbook) runs Darwin"
    )
    assert sum("runs Darwin" in error for error in result["errors"]) == 1
    assert any("strategy must be one of" in error for error in result["errors"][1:])
    assert result["hosts"] == []


def test_a_linux_controller_plans_as_before():
    result = plan.testbed_experiment({"peers": "2", "model": "smallcnn"}, inventory("Linux"))
    assert result["errors"] == [] and result["hosts"] == HOSTS


def test_this_machine_names_its_system_and_counts_cores_without_affinity(monkeypatch):
    assert machine.this_machine()["system"] == "Linux"
    assert machine.cores() == len(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert machine.cores() == 12
