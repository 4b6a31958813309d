"""scripts/uv_pip_install.py: pip's configuration handed to uv (make venv)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "uv_pip_install.py"
_spec = importlib.util.spec_from_file_location("uv_pip_install", SCRIPT)
uv_pip_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_pip_install)

# as `pip config list` prints them on this machine kind: a variable and a file setting the same key
CONFIG = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/old.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/elsewhere'
"""


def test_the_variables_win_over_the_files_and_lists_split():
    settings = uv_pip_install.pip_settings(CONFIG)
    assert (
        settings["find-links"] == "/opt/wheels" and settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    )
    options, env = uv_pip_install.uv_options(settings)
    assert options == [
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


def test_one_index_and_no_index_are_passed_as_set():
    settings = uv_pip_install.pip_settings("user.index-url='https://mirror/simple'\nsite.no-index='true'\n")
    options, env = uv_pip_install.uv_options(settings)
    assert options == ["--index-url", "https://mirror/simple", "--no-index"] and env == {}
    assert uv_pip_install.uv_options({}) == ([], {})  # no configuration: uv's own defaults (PyPI)


def test_the_configuration_reaches_uv(tmp_path):
    """With a stand-in uv beside the venv's python, the command that runs is uv's install with pip's settings
    read from the venv's pip (here PIP_* variables), and uv's exit status is the script's."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True
    )
    log = tmp_path / "argv"
    fake = venv / "bin" / "uv"
    fake.write_text(f'#!/bin/sh\necho "$@" > {log}\necho "$SSL_CERT_FILE" >> {log}\nexit 3\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="/wheels", PIP_CERT="/ca.pem")
    run = subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPT), "--python", str(venv / "bin" / "python"), "-r", "r.txt"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    argv, cert = log.read_text().splitlines()
    python = venv / "bin" / "python"
    assert argv == f"pip install --compile-bytecode --find-links /wheels --python {python} -r r.txt"
    assert cert == "/ca.pem"


def test_without_python_it_says_how_to_call_it():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "-r", "r.txt"], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0 and "usage: uv_pip_install.py --python" in run.stderr


@pytest.mark.parametrize("line", ["global.find-links=/unquoted", "no scope at all", ""])
def test_lines_that_are_not_settings_are_skipped(line):
    assert uv_pip_install.pip_settings(line + "\nglobal.constraint='/c.txt'\n") == {"constraint": "/c.txt"}
