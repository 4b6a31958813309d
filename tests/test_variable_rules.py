"""Every rule between variables (experiment/variables.py, ``rule_problems``) through the three places that
apply it: the grid's check (a grid file refused when it loads, so `trainer grid --dry-run` refuses it before
any run starts), the playbook's plan (controller/plan.py) and the trainer's config (trainer/config.py), each
with the rule's own words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller import plan
from controller.grid.spec import GridError, load_grid
from experiment.variables import DATA_PARALLEL_STRATEGIES, STRATEGIES, TRAINER_ROLES, rule_problems
from trainer.cli import build_parser
from trainer.config import ConfigError, config_from_namespace

REPO = Path(__file__).resolve().parents[1]
# (settings as a grid file gives them, the rule's words); each breaks exactly one rule
CASES = {
    "zero_stage_needs_deepspeed": (
        {"strategy": "hivemind", "peers": 2, "zero_stage": 2},
        "zero_stage needs strategy deepspeed (got strategy=hivemind)",
    ),
    "zero_stage_is_a_stage": (
        {"strategy": "deepspeed", "peers": 2, "zero_stage": 4},
        "zero_stage must be one of 1, 2, 3 (got 4)",
    ),
    "sync_every_needs_diloco": (
        {"strategy": "ddp", "peers": 2, "sync_every": 5},
        "sync_every needs strategy diloco (got strategy=ddp)",
    ),
    "outer_momentum_needs_diloco": (
        {"strategy": "hivemind", "peers": 2, "outer_momentum": 0.5},
        "outer_momentum needs strategy diloco (got strategy=hivemind)",
    ),
    "sync_every_within_the_run": (
        {"strategy": "diloco", "peers": 2, "sync_every": 50, "max_steps": 20},
        "sync_every=50 exceeds max_steps=20: the peers would never sync",
    ),
    "min_peers_needs_hivemind": (
        {"strategy": "ddp", "peers": 2, "min_peers": 1},
        "min_peers needs strategy hivemind (a data-parallel world has a fixed size)",
    ),
    "min_peers_within_the_peers": (
        {"strategy": "hivemind", "peers": 2, "min_peers": 3},
        "min_peers=3 exceeds peers=2",
    ),
    "compression_needs_hivemind": (
        {"strategy": "ddp", "peers": 2, "compression": "fp16"},
        "compression=fp16 needs strategy hivemind (got strategy=ddp)",
    ),
    "dht_bootstrap_monitor_needs_hivemind": (
        {"strategy": "ddp", "peers": 2, "dht_bootstrap": "monitor"},
        "dht_bootstrap=monitor needs strategy hivemind (only Hivemind peers join a DHT)",
    ),
    "a_dataset_without_files_needs_its_directory": (
        {"strategy": "baseline", "peers": 1, "dataset": "cifar10"},
        "dataset=cifar10 needs data_root",
    ),
}
#: rules on variables the trainer does not take (the playbook places the DHT node)
NOT_THE_TRAINERS = {"dht_bootstrap_monitor_needs_hivemind"}


def test_every_rule_has_a_case():
    """Each rule rule_problems knows is walked here: a new rule without a case fails."""
    rules = {rule_problems(settings)[0][0] for settings, _ in CASES.values()}
    assert rules == {
        "zero_stage",
        "sync_every",
        "outer_momentum",
        "min_peers",
        "compression",
        "dht_bootstrap",
        "data_root",
    }
    for name, (settings, words) in CASES.items():
        assert [problem for _, problem in rule_problems(settings)] == [words], name


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_grid_refuses_it_when_it_loads(case, tmp_path):
    settings, words = CASES[case]
    fixed = ", ".join(f"{key}: {value}" for key, value in settings.items())
    grid = tmp_path / "rules.yml"
    grid.write_text(
        f"name: rules\nnoise_floor: false\nfixed: {{model: smallcnn, {fixed}}}\n"
        "blocks:\n  - name: one\n    repeats: 1\n    axes: {seed: [1]}\n"
    )
    with pytest.raises(GridError) as refused:
        load_grid(grid)
    assert words in str(refused.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_playbooks_plan_refuses_it(case):
    settings, words = CASES[case]
    hosts = [f"peer-{n:02d}" for n in range(1, 5)]
    size = {"cluster_address": "10.0.0.1", "vcpus": 2, "memory_mb": 2048}
    inventory = {
        "peers": hosts,
        "local": True,
        "host_cores": 2,
        "hostvars": dict.fromkeys(hosts, size),
        "monitors": ["monitor"],
    }
    raw = {key: str(value) for key, value in {"model": "smallcnn", **settings}.items()}
    errors = plan.testbed_experiment(raw, inventory)["errors"]
    assert any(words in error for error in errors), errors


@pytest.mark.parametrize("case", sorted(set(CASES) - NOT_THE_TRAINERS))
def test_the_trainers_config_refuses_it(case):
    settings, words = CASES[case]
    flags = []
    for key, value in settings.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    with pytest.raises(ConfigError) as refused:
        config_from_namespace(build_parser(["run"]).parse_args(["run", "--model", "smallcnn", *flags]))
    assert refused.value.what == words


def test_the_roles_take_the_strategies_of_the_one_definition():
    """The data-parallel role's interface (its argument spec's choices, which Ansible checks as the role
    starts) lists the strategies the one definition gives it, and every strategy has its role."""
    specs = yaml.safe_load(
        (REPO / "roles" / "data_parallel_peer" / "meta" / "argument_specs.yml").read_text()
    )
    choices = specs["argument_specs"]["main"]["options"]["data_parallel_peer_strategy"]["choices"]
    assert tuple(choices) == DATA_PARALLEL_STRATEGIES
    assert set(TRAINER_ROLES) == set(STRATEGIES)
    assert all((REPO / "roles" / role).is_dir() for role in TRAINER_ROLES.values())
