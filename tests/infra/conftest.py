"""Fixtures for the infra/ tests; the harness itself is in terraform_harness.py."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from terraform_harness import (
    INFRA,
    PROVIDER_ADDRESS,
    PROVIDER_VERSION,
    Terraform,
    base_env,
    terraform_binary,
)


@pytest.fixture(scope="session")
def stub_python() -> str:
    """The Python of the stand-in's own venv (created on first use, needs PyPI once)."""
    result = subprocess.run(
        [str(INFRA / "testing" / "stub-venv.sh")], capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        pytest.fail(f"infra/testing/stub-venv.sh failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def infra_copy(tmp_path_factory) -> Path:
    """A copy of infra/ so init/test never write .terraform/ or lock files into the working tree."""
    target = tmp_path_factory.mktemp("infra") / "infra"
    shutil.copytree(
        INFRA,
        target,
        ignore=shutil.ignore_patterns(
            ".terraform", ".terraform.lock.hcl", "*.tfstate*", "*.tfvars", "__pycache__"
        ),
    )
    return target


@pytest.fixture(scope="session")
def installed_terraform(tmp_path_factory, stub_python) -> Terraform:
    """Terraform that installs the stand-in from a filesystem mirror, like `terraform init` the real one."""
    tmp = tmp_path_factory.mktemp("tf-installed")
    platform_dir = tmp / "mirror" / PROVIDER_ADDRESS / PROVIDER_VERSION / "linux_amd64"
    platform_dir.mkdir(parents=True)
    launcher = platform_dir / f"terraform-provider-opennebula_v{PROVIDER_VERSION}"
    launcher.write_text(f'#!/bin/sh\nexec "{stub_python}" "{INFRA / "testing" / "stub_provider.py"}" "$@"\n')
    launcher.chmod(0o755)
    cli_config = tmp / "offline.tfrc"
    cli_config.write_text(
        "provider_installation {\n"
        f'  filesystem_mirror {{\n    path    = "{tmp / "mirror"}"\n'
        f'    include = ["{PROVIDER_ADDRESS}"]\n  }}\n'
        f'  direct {{\n    exclude = ["{PROVIDER_ADDRESS}"]\n  }}\n'
        "}\n"
    )
    env = base_env(tmp)
    env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    return Terraform(terraform_binary(), env)


@pytest.fixture(scope="session")
def reattached_terraform(tmp_path_factory, stub_python) -> Iterator[Terraform]:
    """Terraform that uses one long-running stand-in for every command (the many `terraform test` runs)."""
    tmp = tmp_path_factory.mktemp("tf-reattach")
    env = base_env(tmp)
    process = subprocess.Popen(
        [stub_python, str(INFRA / "testing" / "stub_provider.py"), "--reattach", str(tmp)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        reattach = json.loads(line)
        assert PROVIDER_ADDRESS in reattach, line
        env["TF_REATTACH_PROVIDERS"] = json.dumps(reattach)
        yield Terraform(terraform_binary(), env)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
