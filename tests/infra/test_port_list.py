"""One port list for the local firewall and the VMs' security group: what role cluster_firewall
opens to the cluster network on a peer of the local inventory is exactly what the Terraform security group
opens inside cluster_cidr, as Ansible and the real `terraform test` (mock provider) each render it."""

from __future__ import annotations

import json
import os
import subprocess

from terraform_harness import REPO, ansible_bin

ROLE = REPO / "roles" / "cluster_firewall"

PLAY = f"""
- hosts: peer-01
  gather_facts: false
  vars_files:
    - {ROLE / "defaults" / "main.yml"}
    - {ROLE / "vars" / "main.yml"}
  tasks:
    - name: The TCP ports the cluster network may reach on a peer
      ansible.builtin.debug:
        var: _cluster_firewall_tcp
"""

TEST_FILE = """
mock_provider "opennebula" {{
  mock_resource "opennebula_security_group" {{
    defaults = {{ id = "101" }}
  }}
  mock_resource "opennebula_virtual_network" {{
    defaults = {{ id = "7" }}
  }}
}}

variables {{
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey test@example"]
  peers              = 2
}}

run "same_ports_as_the_local_firewall" {{
  command = apply

  assert {{
    condition = sort([
      for rule in opennebula_security_group.cluster.rule : rule.range
      if rule.rule_type == "INBOUND" && rule.protocol == "TCP" && rule.ip == "10.42.0.0"
    ]) == sort({ports})
    error_message = "The security group must open to the cluster network exactly role cluster_firewall's ports."
  }}
}}
"""


def firewall_ports(tmp_path) -> list[str]:
    playbook = tmp_path / "ports.yml"
    playbook.write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    done = subprocess.run(
        [ansible_bin("ansible-playbook"), "-i", str(REPO / "inventories" / "local"), str(playbook)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    task = json.loads(done.stdout)["plays"][0]["tasks"][0]
    return task["hosts"]["peer-01"]["_cluster_firewall_tcp"]


def test_the_security_group_opens_the_local_firewalls_ports(reattached_terraform, infra_copy, tmp_path):
    ports = firewall_ports(tmp_path)
    assert "9410" in ports and "32768:60999" in ports, ports  # rendered from the inventory's port variables
    module = infra_copy / "modules" / "cluster"
    test_file = module / "tests" / "port_list.tftest.hcl"
    test_file.write_text(TEST_FILE.format(ports=json.dumps(ports)))
    try:
        if not (module / ".terraform").exists():
            reattached_terraform.run("init", "-input=false", "-no-color", cwd=module)
        result = reattached_terraform.run(
            "test", "-no-color", "-filter=tests/port_list.tftest.hcl", cwd=module, check=False
        )
    finally:
        test_file.unlink()
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "1 passed, 0 failed" in output, output[-4000:]
