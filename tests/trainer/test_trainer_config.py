"""RunConfig: defaults, file + flag merging, and one clear error per bad input (exit status 2)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from trainer_testing import REPO, trainer_command, trainer_env

from trainer.cli import build_parser
from trainer.config import ConfigError, RunConfig, check_multiaddr, config_from_namespace

PEER = "/ip4/127.0.0.1/tcp/31337/p2p/QmXfVWtVSyA3CsVr4FkDFhMrMvnTRrnUXhrKq3AtH9o4bF"


def parse(*flags: str) -> RunConfig:
    return config_from_namespace(build_parser(["run"]).parse_args(["run", *flags]))


def test_defaults_are_valid() -> None:
    config = parse()
    assert (config.strategy, config.model, config.dataset, config.batch_size) == (
        "baseline",
        "resnet18",
        "synthetic",
        32,
    )
    assert config.initial_peers == [] and config.local_updates is False


def test_flags_map_onto_fields() -> None:
    config = parse(
        "--strategy",
        "hivemind",
        "--model",
        "smallcnn",
        "--batch-size",
        "64",
        "--learning-rate",
        "0.1",
        "--target-batch-size",
        "256",
        "--local-updates",
        "--initial-peers",
        PEER,
        PEER,
        "--peers",
        "2",
        "--target-loss",
        "0.5",
        "--vcpus",
        "1",
    )
    assert config.batch_size == 64 and config.learning_rate == 0.1 and config.target_batch_size == 256
    assert config.local_updates is True and config.initial_peers == [PEER, PEER] and config.peers == 2
    assert config.target_loss == 0.5 and config.vcpus == 1
    assert parse("--no-local-updates").local_updates is False


@pytest.mark.parametrize("suffix", [".yml", ".json"])
def test_config_file_with_flags_winning(tmp_path, suffix) -> None:
    settings = {"batch_size": 8, "learning-rate": 0.5, "model": "smallcnn", "initial_peers": [PEER]}
    path = tmp_path / f"settings{suffix}"
    path.write_text(json.dumps(settings))  # JSON is valid YAML too
    config = parse("--config", str(path), "--batch-size", "16")
    assert config.batch_size == 16 and config.learning_rate == 0.5 and config.model == "smallcnn"
    assert config.initial_peers == [PEER] and config.config == str(path)


BAD_INPUTS = [
    (["--batch-size", "0"], "batch_size=0"),
    (["--learning-rate", "-0.1"], "learning_rate=-0.1"),
    (["--learning-rate", "fast"], "learning_rate=fast"),
    (["--model", "vgg"], "model=vgg"),
    (["--dataset", "imagenet"], "dataset=imagenet"),
    (["--strategy", "horovod"], "strategy=horovod"),
    (["--strategy", "ddp", "--peers", "2", "--rank", "2"], "rank=2"),
    (["--strategy", "zero", "--rendezvous", "10.0.0.1"], "rendezvous=10.0.0.1"),
    (["--strategy", "fsdp", "--rendezvous", "10.0.0.1"], "rendezvous=10.0.0.1"),
    (
        ["--strategy", "deepspeed", "--zero-stage", "4"],
        "zero_stage must be one of 1, 2, 3 (got 4) (zero_stage=4)",
    ),
    (
        ["--strategy", "ddp", "--zero-stage", "2"],
        "zero_stage needs strategy deepspeed (got strategy=ddp) (zero_stage=2)",
    ),
    (["--optimizer", "lamb"], "optimizer=lamb"),
    (["--target-batch-size", "0"], "target_batch_size=0"),
    (["--dataset", "cifar10"], "data_root=None"),
    (
        ["--dataset", "fashion-mnist", "--data-root", "/nonexistent/fmnist"],
        "data root not found: /nonexistent/fmnist",
    ),
    (["--vcpus", str((os.cpu_count() or 1) + 1)], "more vcpus than this host has"),
    (["--vcpus", "0"], "vcpus=0"),
    (["--initial-peers", "/ip4/127.0.0.1/tcp/31337"], "lacks /p2p/"),
    (["--initial-peers", "127.0.0.1:31337"], "malformed multiaddr"),
    (["--initial-peers", "/ip4/300.1.1.1/tcp/1/p2p/QmXf"], "bad ip4 address"),
    (["--listen", "/ip4/0.0.0.0/tcp/99999"], "port out of range"),
    (["--peers", "0"], "peers=0"),
    (["--average-state-every", "0"], "average_state_every=0"),
    (["--strategy", "hivemind", "--compression", "zip"], "unknown compression, choose from none, fp16"),
    (["--compression", "fp16"], "compression=fp16 needs strategy hivemind (got strategy=baseline)"),
    (
        ["--strategy", "hivemind", "--compression", "blockwise8"],
        "needs bitsandbytes, which is not installed here (compression=blockwise8)",
    ),
    (["--start-timeout", "0"], "start_timeout=0"),
    (["--peer-id", "a b"], "peer_id=a b"),
    (["--run-id", "lr0.01"], "run_id=lr0.01"),
    (["--metrics-port", "70000"], "metrics_port=70000"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_INPUTS, ids=[" ".join(f) for f, _ in BAD_INPUTS])
def test_bad_input_is_one_clear_error(flags, message) -> None:
    with pytest.raises(ConfigError) as error:
        parse(*flags)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_unknown_key_in_config_file(tmp_path) -> None:
    path = tmp_path / "settings.yml"
    path.write_text("batch_size: 8\nbatch_sise: 9\n")
    with pytest.raises(ConfigError, match="unknown setting.*batch_sise=9"):
        parse("--config", str(path))


@pytest.mark.parametrize(
    "address",
    [
        "/ip4/10.89.64.101/tcp/31337",
        "/ip6/::1/tcp/0",
        "/dns4/peer-01/tcp/31337/p2p/QmXfVWtVSyA3CsVr4FkDFhMrMvnTRrnUXhrKq3AtH9o4bF",
        "/ip4/127.0.0.1/udp/31337/quic",
    ],
)
def test_wellformed_multiaddrs_pass(address) -> None:
    check_multiaddr(address, field_name="listen", require_peer_id=False)


def test_cli_exits_2_with_one_line_before_training(tmp_path) -> None:
    """Through the real command: status 2, one stderr line in the contract's shape, nothing written."""
    results = tmp_path / "results"
    for flags in (["--batch-size", "0"], ["--no-such-flag"]):
        done = subprocess.run(
            trainer_command("run", "--results-dir", str(results), *flags),
            cwd=REPO,
            env=trainer_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("trainer: error: "), done.stderr
    assert (
        "(batch_size=0)"
        in subprocess.run(
            trainer_command("run", "--batch-size", "0"),
            cwd=REPO,
            env=trainer_env(),
            capture_output=True,
            text=True,
        ).stderr
    )
    assert not results.exists()


def test_the_settings_the_experiment_hands_over_keep_its_defaults_and_words():
    """Every variable the playbook hands to the trainer as a flag (experiment/variables.py ``trainers``) is a
    RunConfig field with the definition's default (or a listed reason to differ) and its meaning as help."""
    import dataclasses

    from experiment.variables import VARIABLES
    from trainer.config import TRAINER_DEFAULTS

    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for variable in (v for v in VARIABLES if v.trainers):
        field = fields[variable.name]
        assert field.default == TRAINER_DEFAULTS.get(variable.name, variable.default), variable.name
        assert field.metadata["help"].startswith(variable.meaning), variable.name
    assert set(TRAINER_DEFAULTS) <= set(fields)
