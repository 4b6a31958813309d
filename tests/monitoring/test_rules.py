"""The prometheus role's rendered scrape config and rules: promtool checks, unit tests, inventory mapping."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from monitoring_support import load_rules, recorded_names, resolve_families

from trainer.telemetry import METRICS

RULES_TEST = Path(__file__).with_name("rules_test.yml")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=60)


def test_promtool_check_config(promtool, rendered):
    config, _rules = rendered
    done = run(promtool, "check", "config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout


def test_promtool_check_rules(promtool, rendered):
    _config, rules = rendered
    done = run(promtool, "check", "rules", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests(promtool, rendered):
    _config, rules = rendered
    shutil.copy(RULES_TEST, rules.parent / RULES_TEST.name)
    done = run(promtool, "test", "rules", RULES_TEST.name, cwd=rules.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_a_unit_test(rendered):
    _config, rules_file = rendered
    rules = load_rules(rules_file)
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    alerts_tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", [])}
    # an alert counts as tested only with a case where it fires
    alerts_firing = {
        case["alertname"] for t in tests for case in t.get("alert_rule_test", []) if case.get("exp_alerts")
    }
    recorded_tested = {
        name for t in tests for case in t.get("promql_expr_test", []) for name in recorded_names(case["expr"])
    }
    for name, rule in rules.items():
        if "alert" in rule:
            assert name in alerts_firing, f"alert {name} has no firing unit test"
            assert name in alerts_tested
        else:
            assert name in recorded_tested, f"recording rule {name} has no unit test"


def test_rules_read_only_trainer_metrics(rendered):
    _config, rules_file = rendered
    rules = load_rules(rules_file)
    for name, rule in rules.items():
        unknown = resolve_families(rule["expr"], rules, METRICS) - set(METRICS)
        assert not unknown, f"rule {name} reads metrics the trainer does not export: {unknown}"


def test_scrape_config_generated_from_inventory(rendered):
    config = yaml.safe_load(rendered[0].read_text())
    assert config["global"]["scrape_interval"] == "5s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    trainer = jobs["trainer"]
    assert trainer["honor_labels"] is True
    assert [(s["targets"], s["labels"]) for s in trainer["static_configs"]] == [
        (["10.89.64.101:9410"], {"peer": "peer-01", "host": "peer-01"}),
        (["10.89.64.102:9411"], {"peer": "peer-02", "host": "peer-02"}),
    ]
    node = {s["targets"][0]: s["labels"] for s in jobs["node"]["static_configs"]}
    assert node == {
        "10.89.64.101:9100": {"host": "peer-01", "peer": "peer-01"},
        "10.89.64.102:9100": {"host": "peer-02", "peer": "peer-02"},
        "10.89.64.10:9100": {"host": "monitor"},
    }
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["10.89.64.10:9090"]
