"""`make controller`, the runbook's first step: a venv with Ansible and this checkout's `trainer grid` and
`trainer report`, as any user, without the trainer's own dependencies (torch, Hivemind, DeepSpeed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.load_tolerant
def test_make_controller_installs_the_controller_and_not_the_trainers_dependencies(tmp_path):
    venv = tmp_path / "venv"
    env = {key: value for key, value in os.environ.items() if not key.startswith("VIRTUAL_ENV")}
    made = subprocess.run(
        ["make", f"VENV={venv}", "controller"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    python = str(venv / "bin" / "python")
    for heavy in ("torch", "hivemind", "deepspeed"):
        found = subprocess.run([python, "-c", f"import {heavy}"], capture_output=True, text=True)
        assert found.returncode != 0, f"make controller installed {heavy}"
    dry_run = subprocess.run(
        [
            str(venv / "bin" / "trainer"),
            "grid",
            "grids/smoke.yml",
            "--dry-run",
            "--results-dir",
            str(tmp_path / "r"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry_run.returncode == 0 and "total:" in dry_run.stdout, dry_run.stdout + dry_run.stderr
    report = subprocess.run(
        [str(venv / "bin" / "trainer"), "report", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    syntax = subprocess.run(
        [
            str(venv / "bin" / "ansible-playbook"),
            "--syntax-check",
            "-i",
            "inventories/opennebula",
            "playbooks/wheelhouse.yml",
        ],
        cwd=REPO,
        env={**env, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert syntax.returncode == 0, syntax.stdout[-2000:] + syntax.stderr[-2000:]
    # a second call finds it made
    again = subprocess.run(
        ["make", f"VENV={venv}", "controller"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout
