"""Every `terraform test` file of the modules passes, through the real CLI with mock_provider "opennebula"."""

from __future__ import annotations

import re

import pytest
from terraform_harness import INFRA

TEST_FILES = sorted(path.relative_to(INFRA) for path in INFRA.glob("modules/*/tests/*.tftest.hcl"))


def test_every_study_area_has_test_files():
    names = {path.name for path in TEST_FILES}
    assert {
        "study_configurations.tftest.hcl",
        "validation.tftest.hcl",
        "security_group.tftest.hcl",
        "inventory.tftest.hcl",
    } <= names


@pytest.mark.parametrize("test_file", TEST_FILES, ids=str)
def test_terraform_test_file_passes(reattached_terraform, infra_copy, test_file):
    module = infra_copy / test_file.parent.parent
    if not (module / ".terraform").exists():
        reattached_terraform.run("init", "-input=false", "-no-color", cwd=module)
    result = reattached_terraform.run(
        "test", "-no-color", f"-filter=tests/{test_file.name}", cwd=module, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    runs = len(re.findall(r'^run "', (INFRA / test_file).read_text(), flags=re.MULTILINE))
    assert f"Success! {runs} passed, 0 failed." in output, output[-3000:]
