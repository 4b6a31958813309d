"""experiment.yml rejects bad settings with one clear message before it touches any host."""

from __future__ import annotations

import json
import time

import pytest
from e2e_support import extra_vars, run_playbook
from shared_cluster import REPO

from controller import sizing

CLUSTER_PLAY = "PLAY [Create the local cluster's containers]"


def _load_validation():
    from controller import plan

    return plan


# Each message where it is made: controller/plan.py checks the settings (the validation play's first task,
# playbooks/tasks/plan.yml), here against the local inventory's peers. A playbook run per case cost about 7
# CPU-seconds (Ansible's start and the validation play): 20 of them were about a tenth of `make test`'s first
# phase. The playbook's own refusal is checked below, for each kind of problem it finds beyond the settings.
SETTINGS_CASES = [
    ({"peers": 0}, "peers must be >= 1 (got 0)"),
    (
        {"strategy": "ring"},
        "strategy must be one of hivemind|baseline|ddp|zero|fsdp|deepspeed|diloco|solo (got 'ring')",
    ),
    ({"strategy": "deepspeed", "peers": 2, "zero_stage": 4}, "zero_stage must be one of 1, 2, 3 (got 4)"),
    (
        {"strategy": "ddp", "peers": 2, "zero_stage": 2},
        "zero_stage needs strategy deepspeed (got strategy=ddp)",
    ),
    (
        {"strategy": "diloco", "peers": 2, "sync_every": 0, "outer_learning_rate": "fast"},
        ["sync_every must be >= 1 (got 0)", "outer_learning_rate must be a number (got 'fast')"],
    ),
    ({"max_steps": "many"}, "max_steps must be an integer (got 'many')"),
    ({"learning_rate": -1}, "learning_rate must be a positive number (got '-1')"),
    ({"dataset": "imagenet"}, "dataset must be one of"),
    ({"bandwidth_mbit": -5}, "bandwidth_mbit must be a positive number (got '-5')"),
    ({"dht_bootstrap": "laptop"}, "dht_bootstrap must be one of peer|monitor (got 'laptop')"),
    (
        {"compression": "zip"},
        "compression must be one of none|fp16|scaled_fp16|uint8|quantile8|blockwise8 (got 'zip')",
    ),
    (
        {"compression": "blockwise8"},
        "compression=blockwise8 needs bitsandbytes, which the hosts do not install: add it to "
        "requirements/node.txt (pinned) or pick another compression",
    ),
    (
        {"strategy": "ddp", "peers": 2, "dht_bootstrap": "monitor"},
        "dht_bootstrap=monitor needs strategy hivemind (only Hivemind peers join a DHT)",
    ),
]
# Found by the playbook: the inventory's size (the real local inventory), the faults and the cross traffic
# (their own checks in plan.yml).
PLAYBOOK_CASES = [
    ({"peers": 17}, "peers=17 but the inventory has only 16 hosts in group peers"),
    ({"jitter_ms": 2}, "jitter_ms needs a latency_ms above 0 on the same host (peer-01, peer-02, "),
    (
        # every bad fault in one message: unknown kind, host not in the run, no duration, past the run's
        # end, two faults on one host at once
        {
            "peers": 4,
            "faults": "crash:peer-03@60s,kill:peer-07@60s pause:peer-02@30s,kill:peer-01@3700s,"
            "partition:peer-04@30s+20s,slow:peer-04@40s=50mbit",
        },
        [
            "faults: crash:peer-03@60s: unknown kind 'crash'",
            "faults: kill:peer-07@60s: peer-07 is not in this run",
            "faults: pause:peer-02@30s: pause needs a duration (+20s)",
            "faults: kill:peer-01@3700s ends after the run_timeout of 3600 s",
            "partition:peer-04@30s+20s and slow:peer-04@40s=50mbit overlap on peer-04",
        ],
    ),
    (
        # Churn with no time between failures, and a downtime longer than the run
        {"peers": 4, "churn": "mtbf=0 downtime=2h"},
        [
            "churn: mtbf must be above 0 s (got 0)",
            "churn: downtime=7200 s is longer than the run (3600 s)",
        ],
    ),
    (
        # cross traffic: a host not in the run, a window past the run's end, a rate above the
        # link, a window without its rate
        {
            "peers": 4,
            "bandwidth_mbit": 100,
            "cross_traffic": "peer-02>peer-09@10s+5s=50,peer-01>peer-02@3590s+60s=50 "
            "peer-03>peer-04@10s+5s=500mbit,peer-04>peer-01@10s+5s",
        },
        [
            "cross_traffic: peer-02>peer-09@10s+5s=50: peer-09 is not in this run",
            "cross_traffic: cross:peer-01>peer-02@3590s+60s=50 ends after the run_timeout of 3600 s",
            "cross_traffic: peer-03>peer-04@10s+5s=500mbit: 500 Mbit/s is above peer-03's link (100 Mbit/s)",  # noqa: E501
            "cross_traffic: peer-04>peer-01@10s+5s: needs a rate (=400mbit)",
        ],
    ),
    (
        {"strategy": "baseline", "faults": "restart:peer-01@5s+5s"},
        "faults: a baseline run has one host and nobody to fail against",
    ),
    (
        {"strategy": "ddp", "peers": 2, "faults": "restart:peer-02@5s+5s"},
        "faults: restart:peer-02@5s+5s: a restarted peer rejoins only a hivemind/diloco run (got strategy=ddp",  # noqa: E501
    ),
]


@pytest.mark.parametrize(("settings", "message"), SETTINGS_CASES)
def test_bad_settings_are_named_by_the_plan(settings, message):
    # the local inventory's 16 peers and its monitor host
    inventory = {**_local_inventory(16), "monitors": ["monitor"]}
    errors = _load_validation().testbed_experiment(settings, inventory)["errors"]
    for expected in [message] if isinstance(message, str) else message:
        assert any(expected in error for error in errors), errors


@pytest.mark.parametrize(("settings", "message"), PLAYBOOK_CASES)
def test_bad_settings_fail_before_any_host_is_touched(settings, message, tmp_path):
    run = run_playbook("experiment.yml", *extra_vars(results_root=str(tmp_path), **settings), timeout=120)
    assert run.returncode != 0
    assert "invalid settings, nothing was started" in run.output
    for expected in [message] if isinstance(message, str) else message:
        assert expected in run.output
    assert CLUSTER_PLAY not in run.output


def test_every_problem_is_reported_at_once(tmp_path):
    run = run_playbook(
        "experiment.yml",
        *extra_vars(
            results_root=str(tmp_path), peers=0, strategy="ring", average_state_every=0, cpu_probe_seconds=600
        ),
        timeout=120,
    )
    assert run.returncode != 0
    assert "peers must be >= 1" in run.output and "strategy must be one of" in run.output
    assert "average_state_every must be >= 1 (got 0)" in run.output
    assert "cpu_probe_seconds must be at most 120 (got 600.0)" in run.output


def test_local_defaults_share_sixteen_vcpus_and_scale_the_containers_to_this_machine():
    validation = _load_validation()
    hosts = [f"peer-{i:02d}" for i in range(1, 17)]
    size = {"cluster_address": "10.89.64.101", "vcpus": 2, "memory_mb": 2048}
    inventory = {"peers": hosts, "local": True, "host_cores": 2, "hostvars": dict.fromkeys(hosts, size)}
    result = validation.testbed_experiment({"peers": "8", "average_state_every": "4"}, inventory)
    assert result["errors"] == []
    assert result["trainer_settings"]["average_state_every"] == 4  # a Hivemind setting reaches the trainer
    assert result["settings"]["vcpus"] == 2
    assert result["hosts"] == hosts[:8]
    plan = result["plan"]
    # equal quotas that leave the infrastructure its reserve, and no pinning (docs/fair-cpu.md)
    reserve = sizing.LOCAL_INFRA_RESERVE_CORES
    assert sum(entry["cpus_limit"] for entry in plan.values()) == pytest.approx(2.0 - reserve, abs=0.01)
    assert len({entry["cpus_limit"] for entry in plan.values()}) == 1
    assert {entry["threads"] for entry in plan.values()} == {1}
    assert {entry["cpuset"] for entry in plan.values()} == {None}
    # the containers stand for 2-vCPU VMs: everything in time is dilated by D = vCPUs / cores
    dilation = 16 / (2.0 - reserve)
    assert result["time_dilation"] == pytest.approx(dilation)
    assert result["trainer_settings"]["time_dilation"] == pytest.approx(dilation)
    assert any(f"dilated by D = {dilation:.2f}" in warning for warning in result["warnings"])
    link = plan["peer-01"]  # the modelled default of 1 Gbit/s, shaped to 1 Gbit/s / D
    assert link["modelled_bandwidth_mbit"] == 1000 and link["bandwidth_mbit"] == pytest.approx(
        1000 / dilation
    )

    undilated = validation.testbed_experiment({"peers": "8", "time_dilation": "off"}, inventory)
    assert undilated["time_dilation"] == 1.0 and undilated["plan"]["peer-01"]["bandwidth_mbit"] is None
    assert any("NOT comparable" in warning for warning in undilated["warnings"])
    assert undilated["plan"]["peer-01"]["cpus_limit"] == plan["peer-01"]["cpus_limit"]


def test_a_dilation_factor_sets_the_cores_and_must_fit():
    validation = _load_validation()
    inventory = _local_inventory(4)
    result = validation.testbed_experiment({"peers": "4", "vcpus": "2", "time_dilation": "8"}, inventory)
    assert result["errors"] == [] and result["time_dilation"] == 8.0
    assert {entry["cpus_limit"] for entry in result["plan"].values()} == {0.25}
    refused = validation.testbed_experiment({"peers": "4", "vcpus": "2", "time_dilation": "2"}, inventory)
    assert any("use a factor >= 4.57" in error for error in refused["errors"]), refused["errors"]
    for bad in ("0.5", "fast", "-1"):
        errors = validation.testbed_experiment({"peers": "2", "time_dilation": bad}, inventory)["errors"]
        assert f"time_dilation must be auto, off or a factor >= 1 (got '{bad}')" in errors


def test_a_baseline_uses_one_host_and_a_real_cluster_keeps_its_vcpus():
    validation = _load_validation()
    hosts = ["peer-01", "peer-02"]
    size = {"cluster_address": "192.0.2.1", "vcpus": 4, "memory_mb": 8192}
    inventory = {"peers": hosts, "local": False, "host_cores": 2, "hostvars": dict.fromkeys(hosts, size)}
    result = validation.testbed_experiment({"strategy": "baseline", "peers": "2"}, inventory)
    assert result["errors"] == []
    assert result["hosts"] == ["peer-01"]
    assert result["plan"]["peer-01"]["threads"] == 4
    assert result["plan"]["peer-01"]["cpus_limit"] == 4.0
    too_many = validation.testbed_experiment({"peers": "2", "vcpus": "8"}, inventory)
    assert "vcpus=8 exceeds the 4 vCPUs of peer-01" in too_many["errors"]


def test_prices_reach_each_hosts_plan_and_a_bad_one_is_refused_with_its_host():
    """The inventory's prices: per host, or with -e for every host; only set ones are recorded."""
    validation = _load_validation()
    priced = {"price_per_vcpu_hour": "0.04", "price_per_gb_egress": 0}
    inventory = _local_inventory(2, peer_01=priced)
    plan = validation.testbed_experiment({"peers": "2"}, inventory)["plan"]
    assert (plan["peer-01"]["price_per_vcpu_hour"], plan["peer-01"]["price_per_gb_egress"]) == (0.04, 0.0)
    assert "price_per_vcpu_hour" not in plan["peer-02"]  # no price: the report shows no cost for it
    bad = validation.testbed_experiment(
        {"peers": "2"}, _local_inventory(2, peer_02={"price_per_gb_egress": "-1"})
    )
    assert bad["errors"] == ["peer-02: price_per_gb_egress must be a number >= 0 (got '-1')"], bad["errors"]
    # a bad -e value reaches every host: said once
    given = {"price_per_vcpu_hour": "cheap"}
    inventory = _local_inventory(2, peer_01=given, peer_02=given)
    errors = validation.testbed_experiment({"peers": "2", **given}, inventory)["errors"]
    assert [e for e in errors if "price" in e] == ["price_per_vcpu_hour must be a number (got 'cheap')"]


def _local_inventory(count: int, **per_host: dict) -> dict:
    hosts = [f"peer-{i:02d}" for i in range(1, count + 1)]
    base = {"cluster_address": "10.89.64.101", "memory_mb": 2048}
    hostvars = {host: {**base, **per_host.get(host.replace("-", "_"), {})} for host in hosts}
    return {"peers": hosts, "local": True, "host_cores": 2, "hostvars": hostvars}


def test_heterogeneous_peers_keep_their_ratio_and_their_links():
    """2 fast and 2 slow peers: per-host vCPUs and bandwidth from the inventory, quotas in the same ratio."""
    validation = _load_validation()
    slow = {"vcpus": 1, "bandwidth_mbit": "20"}
    inventory = _local_inventory(4, peer_03=slow, peer_04=slow)
    result = validation.testbed_experiment({"peers": "4"}, inventory)
    assert result["errors"] == []
    plan = result["plan"]
    assert [plan[h]["vcpus"] for h in result["hosts"]] == [4, 4, 1, 1]
    assert plan["peer-01"]["cpus_limit"] == pytest.approx(4 * plan["peer-03"]["cpus_limit"], rel=0.01)
    # dilated (auto, D = 10 vCPUs / 1.75 cores): the modelled links are the inventory's (1 Gbit/s where it
    # gives none), each shaped to its rate / D
    dilation = result["time_dilation"]
    assert dilation == pytest.approx(10 / 1.75)
    modelled = [plan[h]["modelled_bandwidth_mbit"] for h in result["hosts"]]
    assert modelled == [1000.0, 1000.0, 20.0, 20.0]
    assert [plan[h]["bandwidth_mbit"] for h in result["hosts"]] == [round(m / dilation, 3) for m in modelled]
    assert result["settings"]["vcpus"] == 1
    undilated = validation.testbed_experiment({"peers": "4", "time_dilation": "off"}, inventory)["plan"]
    assert [undilated[h]["bandwidth_mbit"] for h in result["hosts"]] == [None, None, 20.0, 20.0]


@pytest.mark.parametrize(
    ("raw", "per_host", "extra", "message"),
    [
        ({"bandwidth_mbit": "-5"}, {}, {}, "bandwidth_mbit must be a positive number (got '-5')"),
        ({"bandwidth_mbit": "fast"}, {}, {}, "bandwidth_mbit must be a number (got 'fast')"),
        ({"latency_ms": "-1"}, {}, {}, "latency_ms must be a number >= 0 (got '-1')"),
        ({}, {"peer_02": {"bandwidth_mbit": "0"}}, {}, "peer-02: bandwidth_mbit must be a positive number"),
        ({}, {}, {"shaped_non_peers": ["peer-99"]}, "peer-99 has link settings"),
        ({"jitter_ms": "-1"}, {}, {}, "jitter_ms must be a number >= 0 (got '-1')"),
        (
            {},
            {"peer_01": {"jitter_ms": "2"}},
            {},
            "jitter_ms needs a latency_ms above 0 on the same host (peer-01)",
        ),
    ],
)
def test_bad_link_settings_are_refused(raw, per_host, extra, message):
    validation = _load_validation()
    inventory = {**_local_inventory(2, **per_host), **extra}
    hostvars = inventory["hostvars"]
    for name in (
        "bandwidth_mbit",
        "latency_ms",
        "jitter_ms",
    ):  # -e reaches every host's hostvars, as in Ansible
        if name in raw:
            for host in hostvars:
                hostvars[host][name] = raw[name]
    errors = validation.testbed_experiment({"peers": "2", **raw}, inventory)["errors"]
    assert any(message in error for error in errors), errors


def test_diloco_needs_a_lighthouse_host_and_its_own_settings():
    """strategy=diloco puts torchft's Lighthouse on the first monitor host and refuses to run without one;
    DiLoCo's settings reach its trainers only, and are refused with another strategy."""
    validation = _load_validation()
    inventory = {**_local_inventory(2), "monitors": ["monitor"]}
    raw = {"peers": "2", "strategy": "diloco", "sync_every": "25", "outer_learning_rate": "0.5"}
    result = validation.testbed_experiment(raw, inventory)
    assert result["errors"] == [] and result["lighthouse_host"] == "monitor"
    assert result["trainer_settings"]["sync_every"] == 25
    assert result["trainer_settings"]["outer_learning_rate"] == 0.5
    assert "outer_momentum" not in result["trainer_settings"]  # the trainer's default
    errors = validation.testbed_experiment(raw, _local_inventory(2))["errors"]
    assert errors == [
        "strategy=diloco needs torchft's Lighthouse on a host in group monitor, and the inventory has none"
    ]
    too_rare = validation.testbed_experiment({**raw, "max_steps": "20"}, inventory)["errors"]
    assert too_rare == ["sync_every=25 exceeds max_steps=20: the peers would never sync"]
    momentum = validation.testbed_experiment({**raw, "outer_momentum": "1"}, inventory)["errors"]
    assert momentum == ["outer_momentum must be below 1 (got 1)"]
    other = validation.testbed_experiment({"peers": "2", "strategy": "ddp", "sync_every": "25"}, inventory)
    assert other["errors"] == ["sync_every needs strategy diloco (got strategy=ddp)"]


def test_deepspeeds_stage_reaches_its_ranks_only():
    """zero_stage is handed to DeepSpeed's ranks (the role passes the settings on as they are: the DiLoCo run
    of tests/e2e/test_faults.py checks that its own reach the trainer)."""
    validation = _load_validation()
    result = validation.testbed_experiment(
        {"peers": "2", "strategy": "deepspeed", "zero_stage": "3"}, _local_inventory(2)
    )
    assert result["errors"] == [] and result["trainer_settings"]["zero_stage"] == 3
    ddp = validation.testbed_experiment({"peers": "2", "strategy": "ddp"}, _local_inventory(2))
    assert "zero_stage" not in ddp["trainer_settings"]


def test_compression_reaches_hivemind_peers_only():
    """compression is handed to the Hivemind peers as the trainer flag; another strategy refuses it."""
    validation = _load_validation()
    hivemind = validation.testbed_experiment({"peers": "2", "compression": "fp16"}, _local_inventory(2))
    assert hivemind["errors"] == [] and hivemind["trainer_settings"]["compression"] == "fp16"
    ddp = validation.testbed_experiment(
        {"peers": "2", "strategy": "ddp", "compression": "uint8"}, _local_inventory(2)
    )
    assert ddp["errors"] == ["compression=uint8 needs strategy hivemind (got strategy=ddp)"]


def test_a_dht_node_on_the_monitor_host_needs_one():
    """dht_bootstrap=monitor puts the DHT-only bootstrap node on the inventory's first monitor host; without
    one it is refused, and a peer bootstraps by default."""
    validation = _load_validation()
    inventory = _local_inventory(2)
    assert validation.testbed_experiment({"peers": "2"}, inventory)["dht_host"] is None
    refused = validation.testbed_experiment({"peers": "2", "dht_bootstrap": "monitor"}, inventory)
    assert refused["errors"] == ["dht_bootstrap=monitor but the inventory has no host in group monitor"]
    placed = validation.testbed_experiment(
        {"peers": "2", "dht_bootstrap": "monitor"}, {**inventory, "monitors": ["monitor"]}
    )
    assert placed["errors"] == [] and placed["dht_host"] == "monitor"
    assert "dht_bootstrap" not in placed["trainer_settings"]  # the playbook's business, not the trainer's


def test_latency_and_jitter_are_planned_and_dilated_on_the_local_cluster():
    validation = _load_validation()
    inventory = _local_inventory(2, peer_01={"latency_ms": "20", "jitter_ms": "2"})
    result = validation.testbed_experiment({"peers": "2", "time_dilation": "off"}, inventory)
    assert result["errors"] == [] and result["plan"]["peer-01"]["latency_ms"] == 20.0
    dilated = validation.testbed_experiment({"peers": "2", "time_dilation": "10"}, inventory)
    assert dilated["errors"] == [], dilated["errors"]
    assert dilated["plan"]["peer-01"]["latency_ms"] == 200.0
    assert dilated["plan"]["peer-01"]["modelled_latency_ms"] == 20.0
    assert (
        dilated["plan"]["peer-01"]["jitter_ms"] == 20.0 and dilated["plan"]["peer-02"]["latency_ms"] is None
    )


def test_unknown_names_are_refused_with_the_closest_known_ones(tmp_path):
    """The newcomer's three typos, refused at once with a suggestion, before anything starts."""
    started = time.monotonic()
    run = run_playbook(
        "experiment.yml",
        *extra_vars(results_root=str(tmp_path), peer=4, max_step=10, modle="smallcnn"),
        timeout=120,
    )
    assert run.returncode != 0
    assert time.monotonic() - started < 30  # about 10 s on an idle machine; this one is shared
    assert "invalid settings, nothing was started" in run.output
    for typo, meant in (("peer", "peers"), ("max_step", "max_steps"), ("modle", "model")):
        assert f"unknown variable '{typo}': did you mean '{meant}'" in run.output, typo
    assert CLUSTER_PLAY not in run.output


def test_role_and_inventory_variables_given_with_e_stay_legal(tmp_path):
    """A role's argument_specs option and an inventory variable set with -e are known: the run gets past the
    name check (here it then stops at a bad setting, so nothing starts)."""
    settings = {
        "trainer_service_omp_wait_policy": "PASSIVE",
        "testbed_shm_size": "2g",
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    run = run_playbook(
        "experiment.yml", *extra_vars(results_root=str(tmp_path), peers=0, **settings), timeout=120
    )
    assert run.returncode != 0
    assert "peers must be >= 1 (got 0)" in run.output
    assert "unknown variable" not in run.output


def test_a_calibrated_run_measures_this_machines_one_thread_rate_for_itself_after_every_check(tmp_path):
    """A dilated run the calibration covers measures this machine's one-thread rate (`trainer calibrate
    --share`, kept per model, batch size and containers) for itself, only after every check passed, and again
    for the next run unless that one allows reusing it (local_rate_reuse_minutes); the plan then gives each
    container one thread at its calibrated rate / D with the pacing's headroom (a SmallCNN calibration)."""
    calibration = tmp_path / "calibration.json"
    rates = [
        {"model": "smallcnn", "batch_size": 16, "threads": threads, "samples_per_second": rate}
        for threads, rate in ((1, 900.0), (2, 1200.0))
    ]
    document = {"kind": "testbed-thread-scaling", "measured_on": {"cores": 2}, "rates": rates}
    calibration.write_text(json.dumps(document))
    cache = tmp_path / "cache"
    settings = {"peers": 2, "vcpus": 2, "model": "smallcnn", "batch_size": 16, "dataset": "synthetic"}
    arguments = ["-i", str(REPO / "inventories" / "local")]
    arguments += extra_vars(results_root=str(tmp_path), calibration=str(calibration), **settings)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        refused = run_playbook("validate.yml", *arguments, "-e", "faults=kill:peer-07@60s", timeout=120)
        assert refused.returncode != 0 and "peer-07 is not in this run" in refused.output
        assert not (cache / "testbed").exists()  # nothing measured for a run that does not start
        first = run_playbook("validate.yml", *arguments, "-e", "time_dilation=auto", timeout=300)
        first_rate = json.loads((cache / "testbed" / "local-rate" / "smallcnn-bs16-n2.json").read_text())
        again = run_playbook("validate.yml", *arguments, "-e", "time_dilation=auto", timeout=300)
        reused = run_playbook(
            "validate.yml",
            *arguments,
            "-e",
            "time_dilation=auto",
            "-e",
            "local_rate_reuse_minutes=30",
            timeout=120,
        )
    assert first.returncode == 0, first.output[-4000:]
    local_rate = cache / "testbed" / "local-rate" / "smallcnn-bs16-n2.json"
    measured = json.loads(local_rate.read_text())["rates"]
    # one one-thread process per container, each under its share of the budget, all at once
    assert [(r["threads"], r["processes"], r["quota_cores"]) for r in measured] == [(1, 2, 0.875)]
    assert "Measure this machine's one-thread rate" in first.output
    assert again.returncode == 0 and "Measure this machine's one-thread rate" in again.output
    assert "measured for every run (local_rate_reuse_minutes=0)" in again.output
    assert reused.returncode == 0 and "Measure this machine" not in reused.output
    later = json.loads(local_rate.read_text())["measured_on"]["measured_at"]
    assert later >= first_rate["measured_on"]["measured_at"]
    one_thread = first_rate["rates"][0]["samples_per_core_second"]
    dilation = max(1.0, 1.15 * 1200.0 / one_thread, 1.15 * 2 * 1200.0 / (1.75 * one_thread))
    assert f"dilated by D = {dilation:.2f}" in first.output and f"{one_thread:g} samples/s" in first.output
