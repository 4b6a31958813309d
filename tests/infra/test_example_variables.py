"""infra/envs/example takes every variable of modules/cluster and passes each on: a setting infra/README.md
documents reaches the module (its own validation answers for it), and a key the module does not take is an
error at the example, not dropped as Terraform drops an object's unknown attributes."""

from __future__ import annotations

import re
import shutil

import pytest
from terraform_harness import INFRA

MODULE = INFRA / "modules" / "cluster"
EXAMPLE = INFRA / "envs" / "example"
# the module's object-valued variables, whose attributes the example lists to refuse the others
OBJECT_VARIABLES = ("monitor", "network", "ports")


def variable_blocks(path) -> dict[str, str]:
    """Each `variable "name" { ... }` of a .tf file, by name (the body up to the next top-level block)."""
    text = path.read_text()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'^variable "(\w+)" \{', text, re.M)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {name: text[start:end] for (start, name), end in zip(starts, ends, strict=True)}


def module_variables() -> dict[str, str]:
    return variable_blocks(MODULE / "variables.tf")


def object_attributes(block: str) -> list[str]:
    """The attribute names of a variable's `type = object({...})`."""
    body = block[block.index("object({") : block.index("})")]
    return re.findall(r"^\s+(\w+)\s+=", body, re.M)


def allowed_keys(block: str) -> list[str]:
    """The keys an example variable's validation allows (its setsubtract list)."""
    match = re.search(r"setsubtract\(keys\(var\.\w+\), \[([^\]]*)\]\)", block)
    assert match, block
    return re.findall(r'"(\w+)"', match.group(1))


def test_the_example_declares_and_passes_every_module_variable():
    example = variable_blocks(EXAMPLE / "variables.tf")
    main = (EXAMPLE / "main.tf").read_text()
    missing = sorted(set(module_variables()) - set(example))
    assert not missing, f"infra/envs/example/variables.tf lacks the module's {missing}"
    unpassed = [
        name for name in module_variables() if not re.search(rf"^\s+{name}\s+= var\.{name}$", main, re.M)
    ]
    assert not unpassed, f"infra/envs/example/main.tf does not pass {unpassed} to modules/cluster"
    extra = sorted(set(example) - set(module_variables()))
    assert not extra, f"the example declares {extra}, which modules/cluster does not take"


@pytest.mark.parametrize("name", OBJECT_VARIABLES)
def test_the_example_allows_exactly_the_module_objects_keys(name):
    module = object_attributes(module_variables()[name])
    example = allowed_keys(variable_blocks(EXAMPLE / "variables.tf")[name])
    assert sorted(example) == sorted(module), (
        f"{name}: the example allows {example}, the module takes {module}"
    )


def test_every_key_the_readme_documents_is_the_modules():
    readme = (INFRA / "README.md").read_text()
    variables = module_variables()
    for name in OBJECT_VARIABLES:
        documented = set(re.findall(rf"`{name}\.(\w+)`", readme))
        unknown = documented - set(object_attributes(variables[name]))
        assert not unknown, (
            f"infra/README.md documents {name}.{sorted(unknown)}, which the module does not take"
        )
    for name in re.findall(r"`(\w+) = ", readme):
        assert name in variables or name in ("peers",), (
            f"infra/README.md sets `{name}`, not a module variable"
        )


EXAMPLE_SETTINGS = """
variables {
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example"]
  peers              = 2
}
"""

# (setting, what `terraform test` says): the module's own validation message shows that the value reached it
CASES = {
    "vlan_id_and_mtu_reach_the_module": (
        'network = { type = "802.1Q", vlan_id = 5000, mtu = 9000 }',
        "network.vlan_id of an 802.1Q network must be 1-4094.",
    ),
    "mtu_reaches_the_module": (
        'network = { type = "802.1Q", vlan_id = 42, mtu = 100 }',
        "network.mtu must be 576-9216 bytes.",
    ),
    "ports_reach_the_module": ("ports = { hivemind = 22 }", "must be distinct and must not be 22"),
    "monitor_reaches_the_module": ("monitor = { vcpus = 0 }", "monitor.vcpus must be a whole number"),
    "an_unknown_network_key_is_refused": ('network = { bridge = "br0", vlanid = 42 }', "network takes only"),
    "an_unknown_port_is_refused": ("ports = { ssh = 2222 }", "ports takes only"),
    "an_unknown_monitor_key_is_refused": ("monitor = { cpus = 4 }", "monitor takes only"),
    "a_valid_vlan_network_plans": ('network = { type = "802.1Q", vlan_id = 42, mtu = 9000 }', None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_setting_reaches_the_module_or_is_refused(reattached_terraform, tmp_path, case):
    setting, message = CASES[case]
    shutil.copytree(
        INFRA,
        tmp_path / "infra",
        ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "*.tfvars", "tests", "__pycache__", "testing"),
    )
    directory = tmp_path / "infra" / "envs" / "example"
    (directory / "tests").mkdir()
    (directory / "tests" / "case.tftest.hcl").write_text(
        f'mock_provider "opennebula" {{\n  mock_resource "opennebula_security_group" {{\n'
        f'    defaults = {{ id = "101" }}\n  }}\n}}\n{EXAMPLE_SETTINGS}\n'
        f'run "{case}" {{\n  command = plan\n\n  variables {{\n    {setting}\n  }}\n}}\n'
    )
    reattached_terraform.run("init", "-input=false", "-no-color", cwd=directory)
    result = reattached_terraform.run("test", "-no-color", cwd=directory, check=False)
    output = (result.stdout + result.stderr).replace("│", " ")
    if message is None:
        assert result.returncode == 0 and "1 passed, 0 failed" in result.stdout, output
    else:
        assert result.returncode != 0, output
        assert message in " ".join(output.split()), output


def test_the_readme_names_every_port_with_its_default():
    """infra/README.md's security group row: each of the module's `ports` with the default it has."""
    block = module_variables()["ports"]
    defaults = dict(re.findall(r"^\s+(\w+)\s+= optional\((?:number|string), \"?([\d:]+)\"?\)", block, re.M))
    documented = dict(re.findall(r"`ports\.(\w+)` \(([\d:]+)", (INFRA / "README.md").read_text()))
    assert documented == defaults, f"infra/README.md names {documented}, the module has {defaults}"
