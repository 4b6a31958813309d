"""infra/ is formatted, and every root and module validates against the OpenNebula provider's schema."""

from __future__ import annotations

import json
import shutil

import pytest
from terraform_harness import INFRA, PROVIDER_ADDRESS, Terraform, terraform_binary

CONFIGURATIONS = [
    "modules/cluster",
    "modules/ansible_inventory",
    "modules/vm_context",
    "envs/example",
    "envs/standin",
    "envs/guests",
]


def test_terraform_fmt_is_clean(tmp_path):
    terraform = Terraform(terraform_binary(), {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    result = terraform.run(
        "fmt", "-check", "-recursive", "-diff", "-no-color", str(INFRA), cwd=tmp_path, check=False
    )
    assert result.returncode == 0, f"terraform fmt would change:\n{result.stdout}"


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_configuration_validates(installed_terraform, infra_copy, configuration):
    directory = infra_copy / configuration
    installed_terraform.run("init", "-input=false", "-no-color", cwd=directory)
    result = installed_terraform.run("validate", "-json", "-no-color", cwd=directory)
    report = json.loads(result.stdout)
    assert report["valid"] is True, report
    assert report["warning_count"] == 0, report["diagnostics"]


def test_stub_schema_is_the_provider_subset_the_modules_use(installed_terraform, infra_copy):
    """`terraform providers schema` through the installed stand-in serves every resource the module uses."""
    directory = infra_copy / "modules" / "cluster"
    installed_terraform.run("init", "-input=false", "-no-color", cwd=directory)
    result = installed_terraform.run("providers", "schema", "-json", cwd=directory)
    schemas = json.loads(result.stdout)["provider_schemas"][PROVIDER_ADDRESS]
    used = {
        "opennebula_virtual_machine",
        "opennebula_security_group",
        "opennebula_virtual_network",
        "opennebula_virtual_network_address_range",
        "opennebula_image",
    }
    assert used <= set(schemas["resource_schemas"])
    vm = schemas["resource_schemas"]["opennebula_virtual_machine"]["block"]
    expected = {"cpu", "vcpu", "memory", "context", "tags", "ip", "sched_ds_requirements"}
    assert expected <= set(vm["attributes"])
    assert {"disk", "nic", "os"} <= set(vm["block_types"])
    rule = schemas["resource_schemas"]["opennebula_security_group"]["block"]["block_types"]["rule"]
    assert rule["min_items"] == 1
    assert rule["block"]["attributes"]["protocol"].get("required") is True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('resource "opennebula_virtual_machine" "vm" {\n  vcpus = 2\n}\n', "Unsupported argument"),
        (
            'resource "opennebula_security_group" "sg" {\n  name = "x"\n}\n',
            'At least 1 "rule" blocks are required',
        ),
        (
            'resource "opennebula_image" "image" {\n  name = "x"\n}\n',
            'The argument "datastore_id" is required',
        ),
        (
            'resource "opennebula_virtual_machine" "vm" {\n  memory = "lots"\n}\n',
            "Incorrect attribute value type",
        ),
    ],
    ids=["unknown-argument", "missing-required-block", "missing-required-argument", "wrong-type"],
)
def test_stub_schema_rejects_what_the_real_provider_rejects(installed_terraform, tmp_path, body, message):
    (tmp_path / "main.tf").write_text(
        'terraform {\n  required_providers {\n    opennebula = {\n      source  = "OpenNebula/opennebula"\n'
        '      version = "~> 1.4"\n    }\n  }\n}\n' + body
    )
    installed_terraform.run("init", "-input=false", "-no-color", cwd=tmp_path)
    result = installed_terraform.run("validate", "-no-color", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert message in " ".join((result.stdout + result.stderr).split())


def test_credentials_come_only_from_the_environment(installed_terraform, infra_copy):
    """envs/example sets no credentials: without OPENNEBULA_* the provider block lacks all three."""
    directory = infra_copy / "envs" / "example"
    installed_terraform.run("init", "-input=false", "-no-color", cwd=directory)
    env = {k: v for k, v in installed_terraform.env.items() if not k.startswith("OPENNEBULA_")}
    result = installed_terraform.run(
        "plan", "-no-color", "-var-file=terraform.tfvars.example", cwd=directory, check=False, env=env
    )
    assert result.returncode != 0
    for argument in ("endpoint", "username", "password"):
        assert f'The argument "{argument}" is required' in result.stderr, result.stderr


def test_example_tfvars_plans_eight_peers(reattached_terraform, infra_copy):
    """terraform.tfvars.example passes every validation and plans 8 peers of 2 vCPUs plus the monitor."""
    directory = infra_copy / "envs" / "example"
    (directory / "terraform.tfvars").write_text((directory / "terraform.tfvars.example").read_text())
    (directory / "tests").mkdir(exist_ok=True)
    (directory / "tests" / "example.tftest.hcl").write_text(
        'mock_provider "opennebula" {}\n\n'
        'run "example" {\n  command = plan\n\n'
        "  assert {\n"
        "    condition     = length(module.cluster.peer_names) == 8\n"
        '    error_message = "8 peers expected"\n  }\n\n'
        "  assert {\n"
        "    condition     = alltrue([\n"
        '      for name, host in module.cluster.hosts : host.vcpus == 2 if host.role == "peer"\n'
        "    ])\n"
        '    error_message = "2 vCPUs per peer expected"\n  }\n'
        "}\n"
    )
    try:
        reattached_terraform.run("init", "-input=false", "-no-color", cwd=directory)
        result = reattached_terraform.run("test", "-no-color", cwd=directory, check=False)
    finally:
        (directory / "terraform.tfvars").unlink()
        shutil.rmtree(directory / "tests")
    assert result.returncode == 0 and "1 passed, 0 failed" in result.stdout, result.stdout + result.stderr
