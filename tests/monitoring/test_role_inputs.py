"""Bad role input fails in preflight with one clear message, before anything is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from monitoring_support import ANSIBLE_PLAYBOOK, PORTS, REPO

CASES = {
    "grafana without password": ("grafana", {}, "grafana_admin_password"),
    "grafana default password": (
        "grafana",
        {"grafana_admin_password": "admin"},
        "grafana_admin_password must be set",
    ),
    "node exporter on a wildcard": (
        "node_exporter",
        {"node_exporter_listen_address": "0.0.0.0"},
        "node_exporter_listen_address must be this host's cluster address",
    ),
    "prometheus threshold out of range": (
        "prometheus",
        {"prometheus_alert_data_loading_share": 1.5},
        "prometheus_alert_data_loading_share must be a share in (0, 1]",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused(case, tmp_path: Path):
    role, variables, message = CASES[case]
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "Apply one role with bad input",
                    "hosts": "monitor",
                    "gather_facts": False,
                    "connection": "local",
                    "tasks": [{"ansible.builtin.include_role": {"name": role}}],
                }
            ]
        )
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "vars": {"testbed_ports": PORTS},
                    "children": {
                        "peers": {"hosts": {"peer-01": {"cluster_address": "127.0.0.1"}}},
                        "monitor": {"hosts": {"monitor": {"cluster_address": "127.0.0.1"}}},
                    },
                }
            }
        )
    )
    extra = {"ansible_python_interpreter": sys.executable, **variables}
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("GRAFANA_ADMIN_PASSWORD", None)
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(playbook), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert message in " ".join(output.split()), output
    # stopped in preflight / argument validation: no install or configure task ran
    assert f"TASK [{role} : Install" not in output
    assert "changed=0" in output
