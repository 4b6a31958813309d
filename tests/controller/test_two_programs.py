"""Two programs and what they share: the trainer (every VM) and the controller (plans, runs and reports
experiments) never import each other's modules; both import the shared package ``experiment`` (the
experiment's definition, the results schema), which imports neither. The playbooks reach the controller
through filter plugins that only adapt it."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "controller", "experiment")
#: what each package may import of the others
ALLOWED = {"trainer": {"experiment"}, "controller": {"experiment"}, "experiment": set()}
FILTER_PLUGINS = REPO / "plugins" / "filter"
ADAPTER_MAX_LINES = 40


def _imported_packages(path: Path) -> set[str]:
    """The top-level packages of ours that ``path`` imports (every import statement, lazy ones too)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    return imported & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_neither_program_imports_the_other(package):
    crossings = {
        str(path.relative_to(REPO)): sorted(_imported_packages(path) - ALLOWED[package] - {package})
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {path: found for path, found in crossings.items() if found} == {}


def test_the_filter_plugins_only_adapt_the_controller():
    for path in sorted(FILTER_PLUGINS.glob("*.py")):
        lines = path.read_text().splitlines()
        assert len(lines) <= ADAPTER_MAX_LINES, (
            f"{path.name}: {len(lines)} lines; its logic belongs in controller/"
        )
        assert _imported_packages(path) == {"controller"}, path.name


def test_running_a_peer_loads_no_controller_code():
    """``trainer run``'s parser is built without importing the controller's commands (their help lines are
    only imported for ``trainer --help``), and ``trainer --help`` lists them from their registration."""
    probe = (
        "import sys; from trainer.cli import build_parser; build_parser(['run']); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'controller', 'experiment'}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "['experiment']"
    listed = subprocess.run(
        [sys.executable, "-m", "trainer", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "run an experiment grid (resumable)" in listed and "tables and plots from a results" in listed


@pytest.mark.parametrize(
    "name",
    [
        "controller.plan",
        "controller.local_cluster",
        "controller.calibration",
        "controller.faults",
        "controller.cross_traffic",
        "controller.names",
        "controller.summary",
        "controller.received_compute",
        "controller.report.headline",
        "controller.report.breakdown",
        "controller.report.data",
        "controller.report.network",
        "controller.report.cost",
        "controller.report.diagnosis",
        "controller.report.plots",
        "controller.reuse",
        "controller.failure",
        "controller.progress",
        "controller.report.study",
        "controller.report.tuning",
        "experiment.machine",
        "experiment.record",
        "experiment.variables",
    ],
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


def _build_wheel(source: Path, out: Path) -> Path:
    built = subprocess.run(
        [str(REPO / "scripts" / "build-trainer-wheel.sh"), str(source), str(out)],
        env={**os.environ, "PYTHON": sys.executable},  # a copied source has no .venv of its own
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(built.stdout.strip())


def test_a_vms_wheel_carries_the_trainer_and_the_shared_package_only(tmp_path):
    """What the trainer role ships to every VM (scripts/build-trainer-wheel.sh): no controller code."""
    with zipfile.ZipFile(_build_wheel(REPO, tmp_path)) as wheel:
        packages = {
            name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith("-info")
        }
    assert packages == {"trainer", "experiment"}


def test_the_wheel_of_unchanged_sources_is_reused_and_a_change_builds_it_again(tmp_path):
    source, out = tmp_path / "source", tmp_path / "out"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    for package in ("trainer", "experiment"):
        shutil.copytree(REPO / package, source / package)
    first = _build_wheel(source, out)
    built_at = first.stat().st_mtime_ns
    assert _build_wheel(source, out) == first and first.stat().st_mtime_ns == built_at  # reused, not rebuilt
    (source / "trainer" / "added_module.py").write_text("VALUE = 1\n")
    again = _build_wheel(source, out)
    with zipfile.ZipFile(again) as wheel:
        assert "trainer/added_module.py" in wheel.namelist()
    assert len(list(out.glob(".source-*"))) == 1  # the old sources' record is gone with their wheel


def test_a_plugin_command_whose_package_is_absent_is_not_offered(monkeypatch):
    """On a VM the controller's commands are registered (one distribution) but not installed."""
    from trainer import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "controller" else real(name)
    )
    assert cli._plugins() == {}
    commands = cli.build_parser([]).format_help().split("positional arguments:")[1]
    assert "run" in commands and "grid" not in commands and "report" not in commands
