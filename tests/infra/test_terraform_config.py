"""infra/ is formatted, and every root and module validates against the OpenNebula provider's schema."""

from __future__ import annotations

import json

import pytest
from terraform_harness import INFRA, PROVIDER_ADDRESS, Terraform, terraform_binary

CONFIGURATIONS = ["modules/cluster", "modules/ansible_inventory", "envs/example"]


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
