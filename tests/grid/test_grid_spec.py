"""Grid files: the thesis grid is the study's tables exactly; the smoke grid; bad files are refused."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from grid_support import REPO, trainer

from controller.grid.command import select_runs
from controller.grid.spec import Grid, GridError, Run, experiment_id, load_grid, parse_grid
from trainer.config import _SAFE_ID

THESIS = REPO / "grids" / "thesis.yml"
SMOKE = REPO / "grids" / "smoke.yml"
BATCH_SIZES = (32, 64, 128)
LEARNING_RATES = (0.001, 0.01, 0.1)


def study_runs(grid: Grid) -> list[Run]:
    """The grid's runs less its noise floor (the first runs)."""
    return [run for run in grid.runs if run.block != "noise-floor"]


def test_thesis_counts_match_the_study():
    grid = load_grid(THESIS)
    # and the noise floor first: 16 peers of 1 vCPU training alone, 3 times
    assert grid.totals() == {"baseline": 36, "hivemind": 144, "solo": 3}
    assert len({run.experiment_id for run in grid.runs}) == 183


def test_thesis_baselines_are_table_5_1():
    """Table 5.1: max steps 10000/5000/2500 for BS 32/64/128, three LRs, 16 vCPUs, 4 repeats each."""
    runs = [run for run in load_grid(THESIS).runs if run.strategy == "baseline"]
    table = {32: 10000, 64: 5000, 128: 2500}
    expected = {(bs, lr, repeat) for bs in BATCH_SIZES for lr in LEARNING_RATES for repeat in (1, 2, 3, 4)}
    assert {(r.settings["batch_size"], r.settings["learning_rate"], r.repeat) for r in runs} == expected
    for run in runs:
        assert run.settings["max_steps"] == table[run.settings["batch_size"]]
        assert run.settings["vcpus"] == 16
        assert run.settings["peers"] == 1
        assert run.settings["model"] == "resnet18"


def test_thesis_hivemind_is_table_5_2():
    runs = [run for run in load_grid(THESIS).runs if run.strategy == "hivemind"]
    rows = set()
    for run in runs:
        s = run.settings
        rows.add(
            (s["batch_size"], s["learning_rate"], s["peers"], s["target_batch_size"], s["local_updates"])
        )
        assert run.repeat == 1
        assert s["vcpus"] * s["peers"] == 16
        if s["peers"] == 2:
            assert s["max_steps"] == {32: 5000, 64: 2500, 128: 1250}[s["batch_size"]]
        else:
            # the table keeps 2500/1250/625 for every batch size ("always totaling 10000 steps")
            assert s["max_steps"] == {4: 2500, 8: 1250, 16: 625}[s["peers"]]
            assert s["max_steps"] * s["peers"] == 10000
    two_peers = {
        (bs, lr, 2, tbs, lu)
        for bs, lr in itertools.product(BATCH_SIZES, LEARNING_RATES)
        for tbs in (10000, 5000, 2500, 1250, 625)
        for lu in (True, False)
    }
    more_peers = {
        (bs, lr, peers, 1250, lu)
        for bs, lr in itertools.product(BATCH_SIZES, LEARNING_RATES)
        for peers in (4, 8, 16)
        for lu in (True, False)
    }
    assert rows == two_peers | more_peers
    assert len(rows) == 144 == 72 * 2


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (
            1,
            {
                "strategy": "baseline",
                "batch_size": 32,
                "learning_rate": 0.001,
                "max_steps": 10000,
                "vcpus": 16,
            },
        ),
        (36, {"strategy": "baseline", "batch_size": 128, "learning_rate": 0.1, "max_steps": 2500}),
        (
            37,
            {
                "strategy": "hivemind",
                "peers": 2,
                "vcpus": 8,
                "batch_size": 32,
                "target_batch_size": 10000,
                "local_updates": True,
                "max_steps": 5000,
            },
        ),
        (
            180,
            {
                "strategy": "hivemind",
                "peers": 16,
                "vcpus": 1,
                "batch_size": 128,
                "learning_rate": 0.1,
                "target_batch_size": 1250,
                "local_updates": False,
                "max_steps": 625,
            },
        ),
    ],
)
def test_thesis_sampled_runs(index, expected):
    run = study_runs(load_grid(THESIS))[index - 1]  # the study's run `index`, after the 3 noise-floor runs
    assert run.index == index + 3
    assert {key: run.settings[key] for key in expected} == expected


def test_thesis_rule_is_configurable(tmp_path):
    """The 'always totaling N steps' rule is a constant of the grid file: change it, the table follows."""
    document = yaml.safe_load(THESIS.read_text())
    document["constants"]["steps_per_experiment"] = 20000
    runs = parse_grid(document, path=tmp_path / "thesis-20k.yml").runs
    scaling = [run for run in runs if run.block == "hivemind-peers"]
    assert {run.settings["peers"]: run.settings["max_steps"] for run in scaling} == {
        4: 5000,
        8: 2500,
        16: 1250,
    }


def test_thesis_dry_run_lists_the_study():
    completed = trainer("grid", str(THESIS), "--dry-run", "--results-dir", "/nonexistent")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[-2] == (
        "total: 183 runs (36 baseline runs, 144 hivemind runs, 3 solo runs); 0 complete, 183 to run"
    )
    assert lines[-1].startswith(
        "time: 0s spent on the complete runs; 0s estimated for the runs to run, and 183"
    )
    listed = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(listed) == 183 and all("noise-floor" in line for line in listed[:3])
    assert "max_steps=625" in listed[-1] and "peers=16" in listed[-1]


def test_smoke_grid_is_3_baselines_and_2_hivemind_settings_3_times():
    grid = load_grid(SMOKE)
    # 3 repeats where a block sets none, and the noise floor first
    assert grid.totals() == {"baseline": 3, "hivemind": 6, "solo": 3}
    baselines = [run for run in grid.runs if run.strategy == "baseline"]
    settings = [{k: v for k, v in run.settings.items() if k != "seed"} for run in baselines]
    assert settings[0] == settings[1] == settings[2]  # the same setting ...
    # ... seeded apart
    assert [(run.repeat, run.settings["seed"]) for run in baselines] == [(1, 0), (2, 1), (3, 2)]
    hivemind = [run for run in grid.runs if run.strategy == "hivemind"]
    assert {run.settings["local_updates"] for run in hivemind} == {True, False}
    for run in study_runs(grid):  # same samples in every experiment
        assert run.settings["max_steps"] * run.settings["peers"] * run.settings["batch_size"] == 3200


def test_ids_are_deterministic_and_valid_for_the_playbook():
    first, second = load_grid(THESIS), load_grid(THESIS)
    assert [r.experiment_id for r in first.runs] == [r.experiment_id for r in second.runs]
    assert first.runs[0].experiment_id.startswith("noise-floor-")
    for run in study_runs(first):
        assert _SAFE_ID.match(run.experiment_id), run.experiment_id
        assert "." not in run.experiment_id  # Hivemind refuses '.' in the run id (its DHT prefix)
        unseeded = {k: v for k, v in run.settings.items() if k != "seed"}  # the grid sets no seed
        assert run.experiment_id == experiment_id(unseeded, run.repeat)
    # integral floats and ints are the same setting
    (run,) = parse_grid(
        {
            "noise_floor": False,
            "blocks": [{"name": "b", "repeats": 1, "fixed": {"batch_size": 32.0, "learning_rate": 1}}],
        },
        path=Path("x.yml"),
    ).runs
    assert experiment_id({"batch_size": 32, "learning_rate": 1.0}, 1) == run.experiment_id


def test_repeat_and_only_select_runs():
    completed = trainer(
        "grid",
        str(THESIS),
        "--dry-run",
        "--repeat",
        "2",
        "--results-dir",
        "/nonexistent",
        "--only",
        "strategy == 'baseline' and batch_size == 32 and learning_rate in [0.01, 0.1]",
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-2].startswith("total: 6 runs (4 baseline runs, 2 solo runs)")
    hivemind = trainer(
        "grid", str(THESIS), "--dry-run", "--repeat", "3", "--only", "peers == 16 and repeat == 3"
    )
    assert hivemind.stdout.splitlines()[-2].startswith("total: 21 runs (18 hivemind runs, 3 solo runs)")


def test_each_repeat_gets_its_own_seed_unless_the_block_sets_one(tmp_path):
    """Repeats are independent samples; the seed stays out of the id, so ids do not change."""
    path = tmp_path / "g.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "fixed": {"strategy": "baseline", "peers": 1},
                "blocks": [
                    {"name": "free", "repeats": 3},
                    {"name": "pinned", "repeats": 2, "fixed": {"seed": 7}},
                ],
            }
        )
    )
    runs = study_runs(load_grid(path))
    assert [(run.block, run.settings["seed"]) for run in runs] == [
        ("free", 0), ("free", 1), ("free", 2), ("pinned", 7), ("pinned", 7),
    ]  # fmt: skip
    free = [run for run in runs if run.block == "free"]
    unseeded = {k: v for k, v in free[1].settings.items() if k != "seed"}
    assert free[1].experiment_id == experiment_id(unseeded, 2)
    assert len({run.experiment_id for run in runs}) == len(runs)


BASE = {"name": "g", "blocks": [{"name": "b", "fixed": {"strategy": "baseline", "peers": 1}}]}


def _with(path: str, value) -> dict:
    document = yaml.safe_load(yaml.safe_dump(BASE))
    keys = path.split(".")
    target = document
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    target[keys[-1]] = value
    return document


@pytest.mark.parametrize(
    ("document", "key", "message"),
    [
        (_with("colour", "red"), "colour", "unknown key"),
        (_with("blocks.0.axis", {}), "blocks[0].axis", "unknown key"),
        (
            _with("blocks.0.fixed.batchsize", 32),
            "blocks[0] (b).fixed.batchsize",
            "not an experiment playbook",
        ),
        (_with("blocks.0.axes.batch_size", []), "blocks[0] (b).axes.batch_size", "non-empty list"),
        (_with("blocks.0.axes.learning_rate", 0.1), "blocks[0] (b).axes.learning_rate", "non-empty list"),
        (_with("blocks.0.fixed.peers", 0), "blocks[0] (b).fixed.peers", "must be >= 1 (got 0)"),
        (
            _with("blocks.0.axes.batch_size", [32, -64]),
            "blocks[0] (b).axes.batch_size",
            "must be >= 1 (got -64)",
        ),
        (
            _with("blocks.0.fixed.max_steps", 2.5),
            "blocks[0] (b).fixed.max_steps",
            "must be an integer (got 2.5)",
        ),
        (
            _with("blocks.0.fixed.learning_rate", 0),
            "blocks[0] (b).fixed.learning_rate",
            "a positive number (got 0)",
        ),
        (_with("blocks.0.fixed.strategy", "ring"), "blocks[0] (b).fixed.strategy", "must be one of"),
        (_with("fixed.model", "vgg"), "fixed.model", "must be one of"),
        (_with("fixed.dataset", "mnist"), "fixed.dataset", "must be one of"),
        (_with("fixed.local_updates", "yes"), "fixed.local_updates", "true or false"),
        (_with("fixed.experiment_id", "x"), "fixed.experiment_id", "set by the grid runner"),
        (_with("fixed.force", True), "fixed.force", "set by the grid runner"),
        (_with("blocks.0.derived.max_steps", "total // peers"), "derived.max_steps", "unknown name total"),
        (_with("blocks.0.derived.max_steps", "10000 //"), "derived.max_steps", "cannot parse"),
        (_with("blocks.0.derived.max_steps", "__import__('os')"), "derived.max_steps", "may be called"),
        (_with("blocks.0.derived.max_steps", "10 - 20"), "derived.max_steps", "must be >= 1 (got -10)"),
        (_with("blocks.0.derived.max_steps", 100), "derived.max_steps", "expression string"),
        (_with("blocks.0.repeats", 0), "blocks[0] (b).repeats", "integer >= 1"),
        (_with("order", "random"), "order", "must be one of blocks, interleaved"),
        (_with("blocks.0.fixed.dataset", "cifar10"), "blocks[0] (b)", "needs data_root"),
        (_with("blocks", []), "blocks", "non-empty list"),
        (_with("constants.peers", 3), "constants.peers", "clashes"),
        ({"blocks": [{"name": "a"}, {"name": "a", "fixed": {"seed": 1}}]}, "blocks[1].name", "duplicate"),
        ({"blocks": [{"name": "a"}, {"name": "b"}]}, "blocks (a and b)", "same settings"),
        (
            {"blocks": [{"name": "a", "fixed": {"seed": 1}, "axes": {"seed": [2]}}]},
            "blocks[0] (a).seed",
            "twice",
        ),
    ],
)
def test_bad_grid_is_refused_naming_file_and_key(tmp_path, document, key, message):
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(GridError) as error:
        load_grid(path)
    text = str(error.value)
    assert text.startswith(f"{path}: "), text
    assert key in text and message in text, text


def test_bad_grid_cli_fails_before_any_run(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("name: bad\nblocks:\n  - name: b\n    axes:\n      peers: []\n")
    completed = trainer("grid", str(path), "--playbook-dir", str(tmp_path / "nowhere"))
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"trainer: error: {path}: blocks[0] (b).axes.peers: an axis must be a non-empty list of values"
    )
    assert completed.stdout == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [("blocks: [", "not valid YAML"), ("- 1\n- 2\n", "must be a mapping")],
)
def test_unreadable_grid(tmp_path, text, message):
    path = tmp_path / "broken.yml"
    path.write_text(text)
    with pytest.raises(GridError, match=message):
        load_grid(path)
    with pytest.raises(GridError, match="cannot read"):
        load_grid(tmp_path / "missing.yml")


def test_network_grid_is_link_rate_by_peers():
    runs = study_runs(load_grid(REPO / "grids" / "network.yml"))
    pairs = {(run.settings["peers"], run.settings["bandwidth_mbit"]) for run in runs}
    assert pairs == set(itertools.product((2, 4, 8), (10, 30, 100, 300, 1000)))
    for run in runs:
        s = run.settings
        assert s["strategy"] == "hivemind" and s["model"] == "resnet18"
        assert s["max_steps"] * s["peers"] * s["batch_size"] == 3 * s["target_batch_size"]  # three epochs
    assert len({run.experiment_id for run in runs}) == len(runs)


def test_communication_grid_compares_compressions_and_a_cross_traffic_window():
    runs = study_runs(load_grid(REPO / "grids" / "communication.yml"))
    settings = [(run.settings["compression"], run.settings.get("cross_traffic")) for run in runs]
    window = "peer-02>peer-03@10s+30s=60mbit"
    expected = [("none", None), ("fp16", None), ("uint8", None), ("none", window)]
    assert sorted(set(settings), key=str) == sorted(expected, key=str)
    assert all(settings.count(setting) == 3 for setting in expected)  # the repeats a verdict needs
    for run in runs:
        s = run.settings
        assert (s["peers"], s["vcpus"], s["bandwidth_mbit"], s["model"]) == (4, 4, 100.0, "resnet18")


def test_strategies_grid_puts_every_strategy_side_by_side():
    runs = study_runs(load_grid(REPO / "grids" / "strategies.yml"))
    strategies = ("hivemind", "ddp", "zero", "fsdp", "deepspeed-z1", "deepspeed-z2", "deepspeed-z3")
    strategies += ("diloco-h5", "diloco-h25")

    def name(run):
        variant = {"zero_stage": "-z", "sync_every": "-h"}
        return run.strategy + "".join(
            f"{mark}{run.settings[key]}" for key, mark in variant.items() if key in run.settings
        )

    named = {(name(run), run.settings["peers"]) for run in runs}
    assert named == {("baseline", 1)} | {(strategy, peers) for strategy in strategies for peers in (2, 4)}
    for run in runs:  # every experiment processes the same samples
        assert run.settings["max_steps"] * run.settings["peers"] * run.settings["batch_size"] == 6400


def test_preprocessing_grid_crosses_strategies_and_workers():
    runs = study_runs(load_grid(REPO / "grids" / "preprocessing.yml"))
    pairs = {(run.settings["preprocessing"], run.settings["data_workers"]) for run in runs}
    assert pairs == set(itertools.product(("decode", "cached"), (0, 1, 2)))
    assert all(run.settings["dataset"] == "imagefolder" for run in runs)


def test_the_noise_floor_runs_first_as_often_as_repeat_says_whatever_only_selects(tmp_path):
    """Short solo runs of the grid's largest run, Hivemind's own settings left out, as many
    as the grid's repeats (the floor is the spread between runs) or as noise_floor says; opt out with
    noise_floor: false, anything but a bool or a number of runs refused."""
    grid = load_grid(SMOKE, repeats=2)
    first = grid.runs[0]
    assert (first.index, first.block, first.repeat, first.strategy) == (1, "noise-floor", 1, "solo")
    assert first.experiment_id.startswith("noise-floor-solo-p2-")
    assert first.settings["peers"] == 2 and first.settings["vcpus"] == 1
    assert first.settings["max_steps"] == 50  # that run's, up to 100
    assert first.settings["eval_every"] == 0
    assert not {"target_batch_size", "local_updates", "matchmaking_time"} & set(first.settings)
    assert [run.index for run in grid.runs] == list(range(1, len(grid.runs) + 1))
    floor = [r for r in grid.runs if r.block == "noise-floor"]
    assert [r.repeat for r in floor] == [1, 2] and floor[1].settings == first.settings
    assert floor[1].experiment_id == first.experiment_id[:-1] + "2"
    assert [r.block for r in load_grid(SMOKE).runs].count("noise-floor") == 3  # DEFAULT_REPEATS
    selected = select_runs(grid, "strategy == 'baseline'")
    assert [r.strategy for r in selected] == ["solo", "solo", "baseline", "baseline"]
    path = tmp_path / "quiet.yml"
    path.write_text(SMOKE.read_text() + "noise_floor: false\n")
    assert "solo" not in load_grid(path).totals()
    path.write_text(SMOKE.read_text() + "noise_floor: 4\n")
    assert [r.repeat for r in load_grid(path).runs if r.block == "noise-floor"] == [1, 2, 3, 4]
    assert [r.repeat for r in load_grid(path, repeats=2).runs if r.block == "noise-floor"] == [1, 2]
    for wrong in ("sometimes", "1"):
        path.write_text(SMOKE.read_text() + f"noise_floor: {wrong}\n")
        with pytest.raises(
            GridError, match="noise_floor: must be true, false or a number of runs of at least 2"
        ):
            load_grid(path)


def test_the_compute_limit_and_its_reruns_are_read_and_checked(tmp_path):
    """A grid's compute_limit (a fraction, or false) and compute_reruns (0 or more); defaults 5 % and 2."""
    smoke = load_grid(SMOKE)
    assert (smoke.compute_limit, smoke.compute_reruns) == (0.05, 2)
    path = tmp_path / "held.yml"
    path.write_text(SMOKE.read_text() + "compute_limit: 0.08\ncompute_reruns: 0\n")
    assert (load_grid(path).compute_limit, load_grid(path).compute_reruns) == (0.08, 0)
    path.write_text(SMOKE.read_text() + "compute_limit: false\n")
    assert load_grid(path).compute_limit is None
    for key, wrong, message in (
        ("compute_limit", "5", "must be a fraction between 0 and 1, or false"),
        ("compute_limit", "true", "must be a fraction between 0 and 1, or false"),
        ("compute_reruns", "-1", "must be a number of runs, 0 or more"),
    ):
        path.write_text(SMOKE.read_text() + f"{key}: {wrong}\n")
        with pytest.raises(GridError, match=f"{key}: {message}"):
            load_grid(path)


def test_a_headline_family_is_named_before_the_runs_and_checked(tmp_path):
    """A grid's headline: its targets, correction and comparisons, each side selecting some of its runs."""
    headline = (
        "headline:\n  loss_target: 1.0\n  comparisons:\n"
        "    - {name: hivemind against the baseline, runs: \"strategy == 'hivemind'\", "
        "against: \"strategy == 'baseline'\"}\n"
    )
    path = tmp_path / "headline.yml"
    path.write_text(SMOKE.read_text() + headline)
    named = load_grid(path).headline
    assert (named.loss_target, named.accuracy_target, named.correction) == (1.0, None, "holm")
    assert [c.name for c in named.comparisons] == ["hivemind against the baseline"]
    assert load_grid(SMOKE).headline is None
    for wrong, message in (
        (
            headline.replace("'baseline'", "'ddp'"),
            "comparisons\\[0\\].against: selects none of the grid's runs",
        ),
        (headline.replace("1.0", "-1"), "headline.loss_target: must be a positive number"),
        (headline + "  correction: bonferroni\n", "headline.correction: must be one of holm, none"),
        (headline.replace("strategy ==", "strategy ===", 1), "comparisons\\[0\\].runs: "),
    ):
        path.write_text(SMOKE.read_text() + wrong)
        with pytest.raises(GridError, match=message):
            load_grid(path)
    study = load_grid(REPO / "grids" / "study.yml").headline
    assert study.loss_target == 1.0 and len(study.comparisons) == 6


STUDY = REPO / "grids" / "study.yml"


def test_study_grid_changes_one_factor_at_a_time_around_its_centre():
    """grids/study.yml: every run trains the same samples; each run differs from the centre point (BS 32,
    LR 0.01, TBS 1250, LU off) in one factor, or is the centre; 3 repeats of every setting, 5 of 2 x 8 and
    8 x 2 (and so of the noise floor)."""
    runs = study_runs(load_grid(STUDY))
    centre = {"batch_size": 32, "learning_rate": 0.01, "target_batch_size": 1250, "local_updates": False}
    settings = {}
    for run in runs:
        s = run.settings
        peers = 1 if s["strategy"] == "baseline" else s["peers"]
        assert s["max_steps"] * s["batch_size"] * peers == 30720  # exactly: the effects match on samples
        assert s["vcpus"] * peers == 16 and s["eval_every"] >= 1
        differs = {k for k, v in centre.items() if k in s and s[k] != v}
        differs |= {"matchmaking_time"} if "matchmaking_time" in s else set()
        assert len(differs - {"local_updates"}) <= 1, run.experiment_id
        settings.setdefault(run.experiment_id.rsplit("-r", 1)[0], []).append(run.repeat)
    # the headline's blocks 5 times (the centre baseline, 2 x 8, 4 x 4, 8 x 2, the target batch sizes, local
    # updates on and off), the others 3
    five = {run.experiment_id.rsplit("-r", 1)[0] for run in runs if run.repeat == 5}
    assert len(five) == 9 and all(sorted(settings[s]) == [1, 2, 3, 4, 5] for s in five)
    assert all(sorted(repeats) == [1, 2, 3] for s, repeats in settings.items() if s not in five)
    five_blocks = {r.block for r in runs if r.repeat == 5}
    assert five_blocks == {"baseline", "peers", "peers-4x4", "target-batch-size", "local-updates"}
    hivemind_peers = {r.settings["peers"] for r in runs if r.block.startswith("peers")}
    assert hivemind_peers == {2, 4, 8}  # 16 x 1 does not fit in this machine's memory (docs/study.md)
    floor = [run.repeat for run in load_grid(STUDY).runs if run.block == "noise-floor"]
    assert floor == list(range(1, 11))  # noise_floor: 10
    assert {r.settings["local_updates"] for r in runs if r.block == "local-updates"} == {True, False}


def test_interleaved_order_runs_every_setting_before_the_next_repeat():
    """order: interleaved: repeat-major over every block; the cluster's shape changes as seldom as it can
    (ascending peers in odd repeats, descending in even: a repeat starts with the shape the last ended)."""
    runs = study_runs(load_grid(STUDY))
    assert [run.repeat for run in runs] == sorted(run.repeat for run in runs)
    assert [run.index for run in load_grid(STUDY).runs] == list(range(1, len(load_grid(STUDY).runs) + 1))

    def peers(run):
        return 1 if run.strategy == "baseline" else run.settings["peers"]

    for repeat in (1, 2, 3, 4, 5):
        order = [peers(run) for run in runs if run.repeat == repeat]
        assert order == sorted(order, reverse=repeat % 2 == 0)
    changes = sum(peers(a) != peers(b) for a, b in itertools.pairwise(runs))
    # 4 shapes in each of the 5 repeats: 3 changes in each; none between repeats
    assert changes == 5 * 3


def test_dry_run_prices_the_runs_to_run_from_the_grid_s_complete_runs(tmp_path):
    """The dry run's time: measured for complete runs, per sample of the same shape for the others, '?'
    where no run of the shape is complete."""
    import json

    grid = load_grid(STUDY)
    done = next(run for run in grid.runs if run.block == "peers" and run.settings["peers"] == 2)
    (tmp_path / done.experiment_id).mkdir()
    (tmp_path / done.experiment_id / "experiment.json").write_text(json.dumps({"complete": True}))
    status = {"runs": {done.experiment_id: {"status": "complete", "seconds": 360.0}}}
    (tmp_path / "grid-study.status.json").write_text(json.dumps(status))
    completed = trainer("grid", str(STUDY), "--dry-run", "--results-dir", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    lines = {
        line.split()[2]: line.split()[3]
        for line in completed.stdout.splitlines()
        if line[:4].strip().isdigit()
    }
    assert lines[done.experiment_id] == "6m00s"
    again = done.experiment_id.replace("-r1", "-r2")
    assert lines[again] == "6m00s"  # the same shape and samples
    bs128 = next(
        r.experiment_id
        for r in grid.runs
        if r.block == "hivemind-batch-size" and r.repeat == 1 and r.settings["batch_size"] == 128
    )
    assert lines[bs128] == "6m00s"  # 117 steps x 128 = 468 x 32 samples a peer
    assert all(lines[r.experiment_id] == "?" for r in grid.runs if r.strategy == "baseline")
    total = completed.stdout.splitlines()[-1]
    assert total.startswith("time: 6m00s spent on the complete runs; ")
