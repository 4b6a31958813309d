"""Helpers of the monitoring tests: render the prometheus role's templates with Ansible, read dashboards."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RENDER_PLAYBOOK = Path(__file__).with_name("render.yml")
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


# the testbed's ports, from their one list (a host given its own testbed_ports overrides them)
PORTS = yaml.safe_load((REPO / "inventories" / "local" / "group_vars" / "all" / "cluster.yml").read_text())[
    "testbed_ports"
]


def write_inventory(path: Path, peers: dict[str, dict], monitor: dict) -> Path:
    """An inventory of the project's shape: groups peers and monitor, per-host cluster_address and ports."""
    inventory = {
        "all": {
            "vars": {"testbed_ports": PORTS},
            "children": {
                "peers": {"hosts": peers},
                "monitor": {"hosts": {"monitor": monitor}},
            },
        }
    }
    path.write_text(yaml.safe_dump(inventory))
    return path


def render_prometheus(out_dir: Path, inventory: Path, **overrides: object) -> tuple[Path, Path]:
    """Run tests/monitoring/render.yml; returns (prometheus.yml, testbed.rules.yml) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rules = out_dir / "testbed.rules.yml"
    extra = {
        "render_dir": str(out_dir),
        "_prometheus_rules_file": str(rules),
        "ansible_python_interpreter": sys.executable,
        **overrides,
    }
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0"}
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(RENDER_PLAYBOOK), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"rendering failed:\n{done.stdout}\n{done.stderr}")
    return out_dir / "prometheus.yml", rules


# ---------------------------------------------------------------- dashboards and PromQL

DASHBOARDS_DIR = REPO / "dashboards"
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TRAINER_NAME = re.compile(r"\btrainer_[a-z0-9_]+\b")
_RECORDED_NAME = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def load_dashboards() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS_DIR.glob("*.json"))}


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(panel["title"], t["expr"]) for panel in dashboard["panels"] for t in panel.get("targets", [])]


def variable_queries(dashboard: dict) -> list[tuple[str, str]]:
    return [(v["name"], v["definition"]) for v in dashboard["templating"]["list"] if v["type"] == "query"]


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace Grafana variables ($name, ${name}) the way Grafana does before sending a query."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    if "$" in expr:
        raise ValueError(f"unsubstituted variable in {expr!r}")
    return expr


def recorded_names(expr: str) -> set[str]:
    """Recording-rule names (level:metric:operations) an expression reads."""
    return set(_RECORDED_NAME.findall(_STRING.sub('""', expr)))


def trainer_families(expr: str, metrics: dict[str, str]) -> set[str]:
    """Trainer metric families (telemetry.METRICS names) an expression reads; unknown names kept as-is."""
    families = set()
    plain = _RECORDED_NAME.sub("", _STRING.sub('""', expr))
    for name in _TRAINER_NAME.findall(plain):
        if name not in metrics:
            for suffix in _HISTOGRAM_SUFFIXES:
                base = name.removesuffix(suffix)
                if base != name and metrics.get(base) == "histogram":
                    name = base
                    break
        families.add(name)
    return families


def load_rules(path: Path) -> dict[str, dict]:
    """Rule name (record or alert) → rule, from a rendered rules file."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return {rule.get("record") or rule["alert"]: rule for group in groups for rule in group["rules"]}


def resolve_families(expr: str, rules: dict[str, dict], metrics: dict[str, str]) -> set[str]:
    """Trainer families an expression reads, following recording rules to their sources."""
    families = trainer_families(expr, metrics)
    for name in recorded_names(expr):
        if name not in rules:
            families.add(f"<unknown recording rule {name}>")
            continue
        families |= resolve_families(rules[name]["expr"], rules, metrics)
    return families
