"""The run roles find the trainer through one path, the command the trainer role links onto PATH, and a host
without it fails before anything is configured, with the path and the remedy named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def _check_installed(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    task = {"ansible.builtin.include_role": {"name": "trainer_service", "tasks_from": "installed"}}
    play = {"name": "Check the trainer", "hosts": "localhost", "gather_facts": False, "tasks": [task]}
    playbook.write_text(json.dumps([play]))
    extra = {"ansible_python_interpreter": sys.executable, "trainer_service_command": command}
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_missing_trainer_is_one_clear_error(tmp_path):
    missing = tmp_path / "bin" / "trainer"
    done = _check_installed(tmp_path, str(missing))
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, output
    assert f"{missing} is missing on localhost; apply the trainer role first" in output


def test_an_installed_trainer_passes(tmp_path):
    done = _check_installed(tmp_path, str(Path(sys.executable).with_name("trainer")))
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_role_or_playbook_repeats_the_venv_path():
    """Only the trainer role knows where its venv is; everything else runs the command on PATH."""
    users = [
        path.relative_to(REPO)
        for folder in ("roles", "playbooks")
        for path in (REPO / folder).rglob("*")
        if path.suffix in (".yml", ".yaml", ".j2")
        and not path.is_relative_to(REPO / "roles" / "trainer")
        and "/opt/testbed/venv" in path.read_text()
    ]
    assert users == []
