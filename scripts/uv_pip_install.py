"""Installs into a venv with uv, under the pip configuration of this machine, which uv does not read.

pip installs one package after another and compiles their modules on one core (torch and its CUDA libraries
are 6 GB unpacked); uv unpacks and compiles in parallel, the same packages at the same versions.
`python benchmarks/wheelhouse_install.py` compares the two on one venv.

pip's settings (``pip config list``: the configuration files and the ``PIP_*`` variables, the variables first)
that choose what is installed are passed to uv as its options:

    index-url, extra-index-url, find-links, constraint, no-index, trusted-host, cert

Other settings (timeouts, the version check) change nothing that is installed. uv keeps what it unpacks in its
cache (``~/.cache/uv``, 6 GB here), hard-linked into the venv where both are on one file system: the set-up of
`.ci/run` took 51-71 s with it and 105 s without (``--no-cache``). With more than one index, uv takes the best
version from all of them, as pip does (``--index-strategy unsafe-best-match``; uv's default takes a package
from the first index that has it).

    python scripts/uv_pip_install.py --python .venv/bin/python -r requirements/dev.txt -e .

Needs uv next to the venv's python (``.venv/bin/uv``) or on PATH.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: pip's configuration scopes, the one that wins first (pip: the environment over the files)
_PRECEDENCE = (":env:", "site", "user", "global")
_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[a-z0-9-]+)=(?P<value>'.*'|\".*\")$")
_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
          "trusted-host": "--allow-insecure-host"}  # fmt: skip
_TRUE = {"1", "true", "yes", "on"}


def pip_settings(config_list: str) -> dict[str, str]:
    """The value of each setting in ``pip config list``'s output, the winning scope's."""
    found: dict[str, dict[str, str]] = {}
    for line in config_list.splitlines():
        match = _LINE.match(line.strip())
        if match:
            found.setdefault(match["key"], {})[match["scope"]] = ast.literal_eval(match["value"])
    return {key: min(scopes.items(), key=lambda item: _rank(item[0]))[1] for key, scopes in found.items()}


def _rank(scope: str) -> int:
    return _PRECEDENCE.index(scope) if scope in _PRECEDENCE else len(_PRECEDENCE)


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for pip's settings."""
    options: list[str] = []
    env: dict[str, str] = {}
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    for key, flag in _LISTS.items():
        for value in settings.get(key, "").split():
            options += [flag, value]
    if settings.get("no-index", "").lower() in _TRUE:
        options.append("--no-index")
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if "--extra-index-url" in options:
        options += ["--index-strategy", "unsafe-best-match"]
    return options, env


def _uv(python: str) -> str:
    beside = Path(python).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        sys.exit(f"uv is not installed: neither {beside} nor uv on PATH (pip install uv)")
    return found


def main(argv: list[str]) -> int:
    if "--python" not in argv[:-1]:
        sys.exit("usage: uv_pip_install.py --python VENV/bin/python [uv pip install arguments...]")
    python = argv[argv.index("--python") + 1]
    config = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    )
    options, env = uv_options(pip_settings(config.stdout))
    command = [_uv(python), "pip", "install", "--compile-bytecode", *options, *argv]
    return subprocess.run(command, env={**os.environ, **env}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
