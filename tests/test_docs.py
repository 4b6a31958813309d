"""The documentation as a reader uses it: its links resolve, the commands and files it names exist with the
flags it shows, and it speaks of the project as it is (no development history: git log keeps that)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from trainer.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
#: the repository's own top-level folders: a path in the docs that starts with one of them must exist
TOP_LEVEL = {path.name for path in REPO.iterdir() if path.is_dir() and not path.name.startswith(".")} - {
    "results",
}
#: files the docs name that a user's own steps write, not the repository
WRITTEN_BY_THE_USER = {
    "inventories/opennebula/hosts.yml": "make inventory writes it from Terraform's output",
    "inventories/opennebula/group_vars/peers/prices.yml": "a site's prices (docs/cost.md)",
    "inventories/opennebula/group_vars/all/vault.yml": "the site's secrets (docs/real-vms.md, step 8)",
    "infra/envs/example/terraform.tfvars": "the site's settings (docs/real-vms.md, step 4)",
    "infra/envs/example/.terraform.lock.hcl": "the first terraform init writes it (docs/real-vms.md, step 5)",
}
#: what a page of development history says: a work period or a tracker entry by its number
_PERIOD, _TICKET = "sess" + "ion", "iss" + "ue"
HISTORY = re.compile(
    rf"\b{_PERIOD}s? \d+|\bthis {_PERIOD}\b|\b{_TICKET}s? #?\d+|\(#\d+\)|\b{_TICKET}s \d+ and \d+"
    # how the code came to be: what the tracker asked, what it did before, what a change replaced
    rf"|\bthe {_TICKET} asks\b|\bused to (?:raise|fail|return|take|run)\b|\bthis replaced\b|\bpredates? the\b"
    r"|\b(?:make demo|a run|the run), 20\d\d-\d\d-\d\d\b",
    re.I,
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.*-]+)")


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def commands(text: str) -> list[str]:
    """Command lines a page shows: each line of its code blocks and each code span, comments cut off."""
    lines = [line for block in FENCE.findall(text) for line in block.splitlines()]
    lines += CODE_SPAN.findall(FENCE.sub("", text))
    return [line.split("  #")[0].strip() for line in lines if line.strip()]


def words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def make_targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", makefile, re.M))


@pytest.mark.parametrize(
    "line",
    [
        "the " + _TICKET + " asks for a check",
        "it used " + "to raise here",
        "the bootstrap this " + "replaced",
        "runs that predate " + "the OpenMP fix",
        "measured in make demo, " + "2026-11-24",
        "in " + _PERIOD + " 12",
        "fixed in (" + "#97)",
    ],
)
def test_the_history_check_catches_its_phrasings(line):
    assert HISTORY.search(line)


@pytest.mark.parametrize("line", ["the process no longer runs", "a ratio used to compare two runs"])
def test_the_history_check_leaves_what_is(line):
    assert not HISTORY.search(line)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_development_history(page):
    found = [line for line in page.read_text().splitlines() if HISTORY.search(line)]
    assert not found, f"{page_id(page)} tells development history (git log keeps it): {found[:3]}"


def test_no_development_history_in_code_tests_or_data():
    """The same over every file git tracks beside the pages: code and its comments, tests, the Makefile, the
    roles' READMEs, data files."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    found = []
    for name in tracked.decode().split("\0"):
        path = REPO / name
        if not name or path in PAGES or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # binary: a figure, an archive
        found += [f"{name}: {line.strip()[:100]}" for line in text.splitlines() if HISTORY.search(line)]
    assert not found, f"development history outside git log: {found[:5]}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{page_id(page)}: links to nothing: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_named_files_exist(page):
    """Every path into the repository's own folders (placeholders and globs aside) names something there."""
    missing = []
    for path in PATH.findall(page.read_text()):
        path = path.rstrip(".,:;")
        top = path.split("/")[0]
        if top not in TOP_LEVEL or "<" in path or "{" in path or path in WRITTEN_BY_THE_USER:
            continue
        if "*" in path:
            if not list(REPO.glob(path)):
                missing.append(path)
        elif not (REPO / path).exists():
            missing.append(path)
    assert not missing, f"{page_id(page)} names files that do not exist: {sorted(set(missing))}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_named_commands_exist_with_their_flags(page):
    """`trainer SUB --flag`, `make TARGET` and `python -m MODULE` as the page shows them."""
    targets = make_targets()
    wrong = []
    for command in commands(page.read_text()):
        argv = words(command)
        if argv and argv[0] in {".venv/bin/trainer", "trainer"} and len(argv) > 1:
            sub = argv[1]
            if sub.startswith("-") or "<" in sub or sub in {"...", "COMMAND"}:
                continue
            parser = build_parser([sub])
            choices = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse has no public way)
            if sub not in choices:
                wrong.append(f"{command}: no command {sub!r}")
                continue
            known = {option for action in choices[sub]._actions for option in action.option_strings}  # noqa: SLF001
            for flag in argv[2:]:
                name = flag.split("=")[0]
                if name.startswith("--") and name not in known:
                    wrong.append(f"{command}: {sub} has no flag {name}")
        elif argv[:1] == ["make"]:
            for target in argv[1:]:
                if re.fullmatch(r"\w[\w-]*", target) and target not in targets:
                    wrong.append(f"{command}: no make target {target!r}")
        elif "-m" in argv[:3] and argv[0].endswith("python"):
            module = argv[argv.index("-m") + 1]
            if module.split(".")[0] in TOP_LEVEL and not (
                (REPO / module.replace(".", "/")).with_suffix(".py").exists()
                or (REPO / module.replace(".", "/") / "__main__.py").exists()
            ):
                wrong.append(f"{command}: no module {module}")
    assert not wrong, f"{page_id(page)}: " + "; ".join(wrong)


def test_the_docs_index_names_every_page():
    index = (REPO / "docs" / "README.md").read_text()
    linked = {target.split("#")[0] for target in LINK.findall(index)}
    pages = {page.name for page in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not name {sorted(pages - linked)}"
