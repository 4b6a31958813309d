"""docs/architecture.md's drawn layout matches the tree: every path it names exists, and every top-level
folder of the repository is in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layout_block() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Repository layout\n", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0]


def named_paths(block: str) -> set[str]:
    """Every folder or file the block names: each line's first word and the paths in its description.

    >>> sorted(named_paths("images/   the images: images/build.sh, images/node/\\n"))
    ['images/', 'images/build.sh', 'images/node/']
    """
    paths = set()
    for line in block.splitlines():
        if line.strip():
            paths.add(line.split()[0])
            paths |= set(
                re.findall(r"\b[a-z_]+/[\w./-]*[\w/]", line.split(None, 1)[1] if " " in line else "")
            )
    return paths


def test_every_path_the_layout_names_exists():
    missing = sorted(path for path in named_paths(layout_block()) if not (REPO / path).exists())
    assert missing == []


def test_every_top_level_folder_is_in_the_layout():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {path.split("/", 1)[0] + "/" for path in tracked if "/" in path and not path.startswith(".")}
    drawn = {line.split()[0] for line in layout_block().splitlines() if line.strip()}
    assert sorted(folders - drawn) == []


def test_a_missing_path_is_found():
    assert "nowhere/" in {p for p in named_paths("nowhere/  gone\n") if not (REPO / p).exists()}
