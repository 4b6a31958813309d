"""The study's published figures (each edition's page, docs/study.md and docs/study-first-edition.md, and its
committed report's CSV files) are what the committed results give: regenerated from studies/ on every run of
the suite, compared cell by cell."""

from __future__ import annotations

import subprocess
import sys

import pytest
from grid_support import REPO

from controller.grid.spec import load_grid
from controller.grid.status import experiment_complete
from controller.report import study

EDITIONS = study.editions()


def test_the_committed_study_tables_are_generated_from_the_committed_results():
    completed = subprocess.run(
        [sys.executable, "-m", "controller.report.study", "--check"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(EDITIONS))
def test_the_committed_results_are_the_study_grid_s(name):
    """Every committed experiment is a run of its edition's grid and is complete; every table of its page is
    one the generator knows."""
    edition = EDITIONS[name]
    grid = {run.experiment_id for run in load_grid(edition.grid).runs}
    committed = sorted(p.parent.name for p in edition.study_dir.glob("*/experiment.json"))
    assert committed, "no committed study results"
    assert set(committed) <= grid
    assert all(experiment_complete(edition.study_dir, name) for name in committed)
    names = {match["name"] for match in study.MARKER.finditer(edition.doc.read_text())}
    assert names and names <= set(study.TABLES)


def test_every_table_is_published():
    published = set()
    for edition in EDITIONS.values():
        published |= {match["name"] for match in study.MARKER.finditer(edition.doc.read_text())}
    assert published == set(study.TABLES)


@pytest.mark.parametrize("name", sorted(EDITIONS))
def test_a_typed_figure_in_a_page_fails_the_check(tmp_path, name):
    """The check is not blind: a table of the page changed by hand is reported."""
    edition = EDITIONS[name]
    doc = tmp_path / edition.doc.name
    doc.write_text(edition.doc.read_text().replace("<!-- /study -->", "| typed |\n<!-- /study -->", 1))
    moved = study.Edition(edition.name, edition.study_dir, edition.grid, doc, edition.report_args)
    problems = study.differences(moved, edition.report_dir)
    assert problems == [f"{doc}: a table differs from the committed results' report"]


def test_a_figure_typed_in_the_study_s_prose_fails_the_check(tmp_path):
    """Outside the generated blocks the page holds settings of its grid only: a measured figure typed into
    its prose is reported, a setting is not."""
    edition = EDITIONS["second"]
    doc = tmp_path / edition.doc.name
    text = edition.doc.read_text()
    doc.write_text(text.replace("## The plan\n", "## The plan\n\nHivemind trains 0.351x the baseline.\n", 1))
    moved = study.Edition(edition.name, edition.study_dir, edition.grid, doc, edition.report_args)
    assert study.differences(moved, edition.report_dir) == [
        f"{doc}: figures typed outside the generated blocks, not settings of grids/study.yml: 0.351"
    ]
    doc.write_text(text.replace("## The plan\n", "## The plan\n\nAt a matchmaking time of 0.5 s.\n", 1))
    assert study.differences(moved, edition.report_dir) == []
