"""The study's published figures (docs/study.md, studies/thesis/report/*.csv) are what the committed results
give: regenerated from studies/thesis/ on every run of the suite, compared cell by cell."""

from __future__ import annotations

import subprocess
import sys

from grid_support import REPO

from controller.grid.spec import load_grid
from controller.grid.status import experiment_complete
from controller.report import study


def test_the_committed_study_tables_are_generated_from_the_committed_results():
    completed = subprocess.run(
        [sys.executable, "-m", "controller.report.study", "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


def test_the_committed_results_are_the_study_grid_s():
    """Every committed experiment is a run of its edition's grid (studies/thesis/grid.yml) and is complete;
    every table of docs/study.md is one the generator knows."""
    grid = {run.experiment_id for run in load_grid(study.GRID).runs}
    committed = sorted(p.parent.name for p in study.STUDY_DIR.glob("*/experiment.json"))
    assert committed, "no committed study results"
    assert set(committed) <= grid
    assert all(experiment_complete(study.STUDY_DIR, name) for name in committed)
    names = {match["name"] for match in study.MARKER.finditer(study.DOC.read_text())}
    assert names == set(study.TABLES)


def test_a_typed_figure_in_docs_study_fails_the_check(tmp_path, monkeypatch):
    """The check is not blind: a table of docs/study.md changed by hand is reported."""
    doc = tmp_path / "study.md"
    doc.write_text(study.DOC.read_text().replace("<!-- /study -->", "| typed |\n<!-- /study -->", 1))
    monkeypatch.setattr(study, "DOC", doc)
    problems = study.differences(study.REPORT_DIR)
    assert problems == ["docs/study.md: a table differs from the committed results' report"]
