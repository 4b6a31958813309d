"""Offline harness for infra/: the real terraform CLI against a schema-only stand-in for the OpenNebula
provider.

Two ways Terraform reaches the stand-in (infra/testing/stub_provider.py), both exercised here:
- installed: a launcher in a `filesystem_mirror` named by a test-only CLI config (TF_CLI_CONFIG_FILE), so
  `terraform init` installs it like the real provider and starts it per command (go-plugin handshake, TLS);
- reattached: one long-running stand-in announced through TF_REATTACH_PROVIDERS, which `terraform test`
  uses for all its runs (starting Python for every provider instance costs ~1 s on a busy 2-core machine).

Python drives the CLI directly: python-terraform 0.10.1 passes `-force` and waits for approval with
Terraform >= 1.0 (see infra/README.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
PROVIDER_VERSION = "1.5.0"
PROVIDER_ADDRESS = "registry.terraform.io/opennebula/opennebula"
TERRAFORM_TIMEOUT = 240
# Test-only credentials: the provider reads OPENNEBULA_* from the environment; nothing is ever contacted.
FAKE_CREDENTIALS = {
    "OPENNEBULA_ENDPOINT": "http://opennebula.invalid:2633/RPC2",
    "OPENNEBULA_USERNAME": "testbed-test",
    "OPENNEBULA_PASSWORD": "not-a-secret",
}


@dataclass
class Terraform:
    binary: str
    env: dict[str, str]

    def run(self, *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None):
        result = subprocess.run(
            [self.binary, *args],
            cwd=cwd,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=TERRAFORM_TIMEOUT,
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"terraform {' '.join(args)} in {cwd} failed ({result.returncode}):\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result


def terraform_binary() -> str:
    binary = shutil.which("terraform") or "/usr/local/bin/terraform"
    if not os.access(binary, os.X_OK):
        pytest.fail("terraform (>= 1.9) is not installed; infra/README.md says how to install it")
    return binary


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "OPENNEBULA_"))}
    env.update(FAKE_CREDENTIALS)
    env.update(
        {
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
            "TF_CLI_CONFIG_FILE": str(tmp / "no-cli-config.tfrc"),
            "HOME": os.environ.get("HOME", str(tmp)),
        }
    )
    (tmp / "no-cli-config.tfrc").write_text("# no provider installation overrides\n")
    return env


def ansible_bin(name: str) -> str:
    candidate = REPO / ".venv" / "bin" / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)
