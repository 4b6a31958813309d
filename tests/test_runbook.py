"""docs/real-vms.md as a new user follows it: its numbered steps in order, every fenced command naming only
what exists (the playbooks and inventories, `terraform -chdir` directories, the variables given with -e or in
a YAML block, the files it copies or edits). The playbooks themselves parse against a rendered inventory in
tests/infra/test_inventory_handoff.py; the make targets and `trainer` flags are test_docs.py's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from experiment.variables import BY_NAME

REPO = Path(__file__).resolve().parents[1]
RUNBOOK = REPO / "docs" / "real-vms.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: the steps a user takes, in this order (the page's numbered sections)
STEPS = (
    "The controller",
    "The credentials",
    "The image and its user",
    "The cluster's settings",
    "Create the VMs",
    "The inventory",
    "Reach the hosts",
    "The dataset",
    "Where the packages come from",
    "Run an experiment",
    "Run a grid",
    "The report",
    "Remove the VMs",
)
#: files the steps themselves create (a copy of an example, a vault)
CREATED_BY_THE_STEPS = {
    "infra/envs/example/terraform.tfvars",
    "infra/envs/example/.terraform.lock.hcl",
    "inventories/opennebula/group_vars/all/vault.yml",
}


def steps() -> list[tuple[int, str, str]]:
    """(number, title, text) of each numbered section."""
    found = re.findall(r"^## (\d+)\. ([^\n]+)\n(.*?)(?=^## |\Z)", RUNBOOK.read_text(), re.S | re.M)
    return [(int(number), title, text) for number, title, text in found]


def fenced(kind: str | None = None) -> list[str]:
    """The fenced blocks' lines (continuations joined, comments cut off), or a kind's blocks."""
    blocks = [body for lang, body in FENCE.findall(RUNBOOK.read_text()) if kind is None or lang == kind]
    lines = []
    for body in blocks:
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line:
                lines.append(line)
    return lines


def argv_of(line: str) -> list[str]:
    """Each command of a line (split at && and ;) as its words, the environment assignments before it cut."""
    commands = []
    for part in re.split(r"&&|;", line):
        words = shlex.split(part)
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def known_variables() -> set[str]:
    """The experiment's variables, every role's defaults and argument specs, the inventories' group vars."""
    names = set(BY_NAME)
    for defaults in REPO.glob("roles/*/defaults/main.yml"):
        names |= set(yaml.safe_load(defaults.read_text()) or {})
    for specs in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(specs.read_text()).get("argument_specs") or {}).values():
            names |= set(entry.get("options") or {})
    for group_vars in REPO.glob("inventories/*/group_vars/**/*.yml"):
        names |= set(yaml.safe_load(group_vars.read_text()) or {})
        names |= set(re.findall(r"^# (\w+):", group_vars.read_text(), re.M))  # the settings a site uncomments
    return names


def test_the_steps_are_numbered_in_order():
    found = steps()
    assert [number for number, _, _ in found] == list(range(1, len(STEPS) + 1))
    assert [title for _, title, _ in found] == list(STEPS)
    without = [title for _, title, text in found if "```" not in text]
    assert not without, f"steps without a command: {without}"


def test_the_ansible_commands_name_playbooks_inventories_and_variables_that_exist():
    variables = known_variables()
    wrong, seen = [], 0
    for line in fenced("sh"):
        for argv in argv_of(line):
            if argv[0] != "ansible-playbook":
                continue
            seen += 1
            playbooks = [word for word in argv if word.endswith(".yml")]
            assert playbooks, line
            wrong += [f"{line}: no {p}" for p in playbooks if not (REPO / p).is_file()]
            inventory = argv[argv.index("-i") + 1]
            if not (REPO / inventory).exists():
                wrong.append(f"{line}: no inventory {inventory}")
            for index, word in enumerate(argv):
                if word == "-e":
                    name = argv[index + 1].split("=")[0]
                    if name not in variables:
                        wrong.append(f"{line}: no variable {name}")
    assert seen >= 2, "the runbook runs no playbook"
    assert not wrong, "; ".join(wrong)


def test_the_yaml_settings_are_variables_the_roles_take():
    variables = known_variables()
    settings = [line.split(":")[0] for line in fenced("yaml")]
    assert settings, "the runbook's offline branch names no setting"
    unknown = [name for name in settings if name not in variables]
    assert not unknown, f"docs/real-vms.md sets {unknown}, which no role or inventory takes"


def test_terraform_and_the_files_the_steps_touch_exist():
    wrong = []
    for line in fenced("sh"):
        for argv in argv_of(line):
            if argv[0] == "terraform":
                directory = next((word.split("=", 1)[1] for word in argv if word.startswith("-chdir=")), None)
                if directory is None or not (REPO / directory / "main.tf").is_file():
                    wrong.append(f"{line}: terraform runs in no configuration of the repository")
            elif argv[0] in {"cp", "$EDITOR", "ansible-vault", "git"} and argv[0:2] != ["git", "clone"]:
                for word in argv[1:]:
                    named = "/" in word and not word.startswith("-") and word not in CREATED_BY_THE_STEPS
                    if named and not (REPO / word).exists():
                        wrong.append(f"{line}: no {word}")
    assert not wrong, "; ".join(wrong)


def test_the_playbooks_the_runbook_runs():
    """The list test_inventory_handoff.py syntax-checks against the rendered inventory: what the page runs."""
    assert set(runbook_playbooks()) >= {"playbooks/check-hosts.yml", "playbooks/experiment.yml"}


def runbook_playbooks() -> list[str]:
    found = []
    for line in fenced("sh"):
        for argv in argv_of(line):
            if argv[0] == "ansible-playbook":
                found += [word for word in argv if word.endswith(".yml") and word not in found]
    return found
