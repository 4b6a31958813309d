"""The hand-off to Ansible: Terraform renders the inventory for 8 peers (a real, offline `terraform apply`
of the built-in-only inventory module the cluster module uses), infra/write-inventory.sh writes it next to
inventories/opennebula/group_vars, Ansible loads it, and the experiment playbook's validation accepts it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from terraform_harness import INFRA, REPO, ansible_bin

PEERS = 8
CLUSTER_PREFIX = "10.42.0"
# the testbed's ports as the cluster module hands them over (its defaults: the local inventory's list, which
# tests/infra/test_port_list.py keeps the same as the security group's)
PORTS = yaml.safe_load((REPO / "inventories" / "local" / "group_vars" / "all" / "cluster.yml").read_text())[
    "testbed_ports"
]

# A root configuration shaped like infra/envs/example's output, with the addresses the cluster module assigns
# (monitor .10, peer-NN .(100+NN)) and the study's 8x2 split.
ROOT_CONFIGURATION = """
variable "peers" {
  type = number
}

variable "ports" {
  type = any
}

module "inventory" {
  source = "MODULE"

  peers = [
    for n in range(1, var.peers + 1) : {
      name            = format("peer-%02d", n)
      ansible_host    = "PREFIX.${100 + n}"
      cluster_address = "PREFIX.${100 + n}"
      vcpus           = 2
      memory_mb       = 4096
    }
  ]
  monitor = {
    ansible_host    = "PREFIX.10"
    cluster_address = "PREFIX.10"
    vcpus           = 2
    memory_mb       = 4096
  }
  cluster_cidr = "PREFIX.0/24"
  ports        = var.ports
}

output "ansible_inventory" {
  value = module.inventory.yaml
}
"""


@pytest.fixture(scope="module")
def rendered_inventory(reattached_terraform, infra_copy, tmp_path_factory) -> Path:
    """inventories/opennebula as a user has it after `terraform apply` and `make inventory`, in a temp dir."""
    root = tmp_path_factory.mktemp("inventory-root")
    (root / "main.tf").write_text(
        ROOT_CONFIGURATION.replace("MODULE", str(infra_copy / "modules" / "ansible_inventory")).replace(
            "PREFIX", CLUSTER_PREFIX
        )
    )
    terraform = reattached_terraform
    terraform.run("init", "-input=false", "-no-color", cwd=root)
    terraform.run(
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        f"-var=peers={PEERS}",
        f"-var=ports={json.dumps(PORTS)}",
        cwd=root,
    )

    inventory = tmp_path_factory.mktemp("inventories") / "opennebula"
    shutil.copytree(REPO / "inventories" / "opennebula" / "group_vars", inventory / "group_vars")
    env = dict(terraform.env, PATH=f"{Path(terraform.binary).parent}:{os.environ['PATH']}")
    env["ANSIBLE_INVENTORY_BIN"] = ansible_bin("ansible-inventory")
    result = subprocess.run(
        [str(INFRA / "write-inventory.sh"), str(root), str(inventory / "hosts.yml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return inventory


def ansible_env() -> dict[str, str]:
    return dict(
        os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_FAILED="true"
    )


def test_write_inventory_refuses_a_root_without_the_output(tmp_path):
    (tmp_path / "main.tf").write_text('output "something_else" {\n  value = 1\n}\n')
    result = subprocess.run(
        [str(INFRA / "write-inventory.sh"), str(tmp_path), str(tmp_path / "hosts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert not (tmp_path / "hosts.yml").exists()


def test_ansible_loads_groups_hosts_and_vars(rendered_inventory):
    result = subprocess.run(
        [ansible_bin("ansible-inventory"), "-i", str(rendered_inventory), "--list"],
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listing = json.loads(result.stdout)
    peers = [f"peer-{n:02d}" for n in range(1, PEERS + 1)]
    assert listing["peers"]["hosts"] == peers
    assert listing["monitor"]["hosts"] == ["monitor"]
    assert set(listing["all"]["children"]) == {"ungrouped", "peers", "monitor"}

    hostvars = listing["_meta"]["hostvars"]
    for n, name in enumerate(peers, start=1):
        host = hostvars[name]
        assert host["ansible_host"] == host["cluster_address"] == f"{CLUSTER_PREFIX}.{100 + n}"
        assert (host["vcpus"], host["memory_mb"]) == (2, 4096)
        assert host["testbed_ports"] == PORTS
        assert host["ansible_user"] == "debian"
        assert host["testbed_local_cluster"] is False  # from group_vars/all
        assert host["testbed_cluster_cidr"] == f"{CLUSTER_PREFIX}.0/24"
    assert hostvars["monitor"]["cluster_address"] == f"{CLUSTER_PREFIX}.10"


def run_validation(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ansible_bin("ansible-playbook"), "-i", str(inventory), "playbooks/validate.yml", *extra],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_experiment_validation_accepts_the_inventory(rendered_inventory):
    result = run_validation(rendered_inventory, "-e", f"peers={PEERS}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{PEERS} host(s) " + " ".join(f"peer-{n:02d}" for n in range(1, PEERS + 1)) in " ".join(
        result.stdout.split()
    )


def test_experiment_validation_rejects_more_peers_than_rendered(rendered_inventory):
    result = run_validation(rendered_inventory, "-e", f"peers={PEERS + 1}")
    assert result.returncode != 0
    assert f"peers={PEERS + 1} but the inventory has only {PEERS} hosts in group peers" in result.stdout


def runbook_playbooks() -> list[str]:
    """The playbooks docs/real-vms.md runs in its fenced commands, and the one `make wheelhouse` runs."""
    text = (REPO / "docs" / "real-vms.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    named = re.findall(r"ansible-playbook [^\n]*?(playbooks/[\w-]+\.yml)", "\n".join(blocks))
    return list(dict.fromkeys([*named, "playbooks/wheelhouse.yml"]))


@pytest.mark.parametrize("playbook", runbook_playbooks())
def test_the_runbooks_playbooks_parse_with_the_inventory(rendered_inventory, playbook):
    """Every playbook the runbook runs, against the inventory Terraform renders (experiment.yml among
    them)."""
    result = subprocess.run(
        [ansible_bin("ansible-playbook"), "-i", str(rendered_inventory), "--syntax-check", playbook],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
