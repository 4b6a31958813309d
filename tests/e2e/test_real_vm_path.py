"""The real cluster's path end to end: hosts that start bare, reached over SSH as a non-root user
with sudo, their inventory rendered by Terraform's inventory module, the experiment playbook unchanged, the
trainer's dependencies from a wheelhouse built for the hosts' platform.

The hosts are scripts/standin-vms.sh's containers: the bare base image plus openssh-server, the cloud image's
`debian` user with passwordless sudo and an authorized key, nothing of the testbed, and what Debian's cloud
image does besides (STANDIN_CLOUD_IMAGE): root's login refused with the image's message, the host name on
127.0.1.1, dpkg's lock held by a first-boot job after sshd is up. As a cloud's VMs seen from outside, they
have no internet (the archive only through a package proxy the test runs on this machine, STANDIN_OFFLINE)
and this machine reaches them only through a bastion (STANDIN_BASTION, Terraform's ssh_bastion). One
bring-up and one first run serve every test here; the later runs, the scan and the bad inputs reuse them
(docs/real-vms.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2e_support import forward_proxy, icmp_unlimited, outside_namespace, port_scan, read_json, run_playbook
from shared_cluster import BIN, REPO, environment

from controller.wheelhouse import Target, installer, uv_command

# stand_in_vms: `make test` runs this file beside the local cluster's tests (its own containers, network and
# outside namespace), see the Makefile
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.stand_in_vms]

PREFIX, NETWORK, SUBNET = "testbed-vmtest-", "testbed-vmtest", "10.89.74"
BASTION = f"{SUBNET}.9"  # the only host this machine's SSH reaches (STANDIN_BASTION)
# the stand-ins' peers: 2 in CI; TESTBED_STANDIN_PEERS=8 for the measurement of docs/real-vms.md (each host
# about 6 GB of disk)
PEERS = int(os.environ.get("TESTBED_STANDIN_PEERS", "2"))
HOSTS = {**{f"peer-{i:02d}": f"{SUBNET}.{100 + i}" for i in range(1, PEERS + 1)}, "monitor": f"{SUBNET}.10"}
# small and quick, as tests/e2e/test_local_cluster.py's FAST; undilated (real VMs are)
RUN = {
    "peers": PEERS,
    "dataset_storage": "local",
    "trainer_dependency_source": "wheelhouse",
    "grafana_install": False,  # Grafana's apt repository is out of reach here
    "model": "smallcnn",
    "batch_size": 16,
    "max_steps": 40,
    "target_batch_size": 256,
    "matchmaking_time": 2,
    "averaging_timeout": 20,
    "progress_interval": 10,
    # chrony to an NTP server in the cluster network (the controller's address; nobody answers there): a
    # container may not set the clock, so chronyd only follows (-x)
    "clock_sync_ntp_servers": [f"{SUBNET}.1"],
    "clock_sync_set_clock": False,
}
# 1 MB over TCP port 8099, received and sent (tests the shaped class between peers)
RECEIVE = (
    'import socket; s = socket.create_server(("", 8099)); c, _ = s.accept(); n = 0\n'
    "while (b := c.recv(65536)): n += len(b)\nprint(n)"
)
SEND = 'import socket, sys; socket.create_connection(("%s", 8099)).sendall(sys.stdin.buffer.read())'
# the plays that set hosts up: a second run must change nothing in them
SETUP_PLAYS = (
    "Reach every host",
    "Keep the hosts' clocks in step",
    "Close every host by default",
    "Make the dataset available",
    "Node exporter on every peer",
    "Prometheus and Grafana",
    "Install the trainer",
)


class Cluster:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.key = work / "id_ed25519"
        self.inventory = work / "inventory"
        self.env = {
            **environment(),
            "STANDIN_PREFIX": PREFIX,
            "STANDIN_NETWORK": NETWORK,
            "STANDIN_SUBNET_PREFIX": SUBNET,
            "STANDIN_CLOUD_IMAGE": "1",
            "STANDIN_FIRST_BOOT_SECONDS": "45",
            "STANDIN_OFFLINE": "1",
            "STANDIN_BASTION": "1",
        }
        self.runs: dict[str, tuple[int, str, float]] = {}
        self.apt_proxy = ""  # the site's package proxy, on the controller (the fixture starts it)
        # SSH's own configuration, as a user's ~/.ssh/config: the bastion's key (ProxyJump does not pass
        # --private-key on to the jump) and the stand-ins' host keys in a file of the test's (the inventory's
        # accept-new stays as it is)
        self.ssh_config = work / "ssh_config"
        self.ssh_config.write_text(
            f"Host {BASTION}\n  User debian\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            f"Host *\n  UserKnownHostsFile {work / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
            "  BatchMode yes\n"
        )
        self.known_hosts = f"ansible_ssh_extra_args='-F {self.ssh_config}'"

    def standin(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / "scripts" / "standin-vms.sh"), *args], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=600, check=False)  # fmt: skip

    def ssh_command(
        self, host: str, command: str, user: str = "debian", key: Path | None = None
    ) -> list[str]:
        """ssh to a host as the controller reaches it: through the bastion."""
        return ["ssh", "-F", str(self.ssh_config), "-J", f"debian@{BASTION}", "-i", str(key or self.key),
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={self.work / 'known_hosts'}",
                f"{user}@{HOSTS[host]}", command]  # fmt: skip

    def ssh(self, host: str, command: str, user: str = "debian", key: Path | None = None):
        return subprocess.run(self.ssh_command(host, command, user, key), capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip

    def playbook(self, experiment_id: str, *extra: str, inventory: Path | None = None, **values):
        """experiment.yml over SSH with the rendered inventory and the stand-ins' key."""
        args = ["-i", str(inventory or self.inventory), "--private-key", str(self.key),
                "-e", json.dumps({**RUN, "apt_source_proxy": self.apt_proxy, "experiment_id": experiment_id,
                                  **values}),
                # the stand-ins' host keys in a file of the test's (the inventory's accept-new stays as it is)
                "-e", self.known_hosts, *extra]  # fmt: skip
        started = time.monotonic()
        # each task's time in the output (docs/real-vms.md takes its figures from there)
        done = run_playbook("experiment.yml", *args, timeout=1500,
                            env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"})  # fmt: skip
        self.runs[experiment_id] = (done.returncode, done.output, time.monotonic() - started)
        (self.work / f"{experiment_id}.log").write_text(done.output)
        return done


def _render_inventory(cluster: Cluster) -> str:
    """The path `make inventory` takes: terraform applies infra/envs/standin (infra/modules/ansible_inventory)
    with the hosts' addresses, infra/write-inventory.sh writes hosts.yml beside inventories/opennebula's
    group_vars, unchanged."""
    root = cluster.work / "terraform"
    shutil.copytree(REPO / "infra" / "envs" / "standin", root)
    main = root / "main.tf"
    main.write_text(main.read_text().replace('"../../modules/', f'"{REPO}/infra/modules/'))
    hosts = f"-var-file={cluster.work}/hosts.tfvars.json"
    for command in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false", hosts]):
        done = subprocess.run(["terraform", f"-chdir={root}", *command], capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cluster.inventory.mkdir()
    (cluster.inventory / "group_vars").symlink_to(REPO / "inventories" / "opennebula" / "group_vars")
    env = {**cluster.env, "ANSIBLE_INVENTORY_BIN": str(BIN / "ansible-inventory")}
    write = [str(REPO / "infra" / "write-inventory.sh"), str(root), str(cluster.inventory / "hosts.yml")]
    done = subprocess.run(write,
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return (cluster.inventory / "hosts.yml").read_text()


@pytest.fixture(scope="module")
def vms(tmp_path_factory):
    """Bare stand-ins up, their inventory rendered, and the first run over SSH; removed at the end."""
    cluster = Cluster(tmp_path_factory.mktemp("vms"))
    up = cluster.standin("up", str(PEERS), str(cluster.work))
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        # bare: nothing of the testbed inside
        for host in HOSTS:
            bare = cluster.ssh(host, "python3 -c 'import torch'; test ! -e /opt/testbed; echo rc=$?")
            assert "ModuleNotFoundError" in bare.stderr, (host, bare.stdout, bare.stderr)
            assert "rc=0" in bare.stdout, (host, "/opt/testbed exists before the run")
            assert cluster.ssh(host, "id -u").stdout.strip() != "0", host  # not root
            # as a cloud image: the host name on loopback, root's login refused with the image's message
            assert cluster.ssh(host, "getent hosts $(hostname)").stdout.split()[:1] == ["127.0.1.1"], host
            as_root = cluster.ssh(host, "id -u", user="root")
            assert as_root.returncode == 142 and 'login as the user "debian"' in as_root.stdout, as_root
        # without internet: the archive is out of reach (by its address: the hosts' DNS is outside too) but
        # through the site's proxy
        archive = socket.gethostbyname("deb.debian.org")
        direct = cluster.ssh(
            "peer-01", f"python3 -c 'import socket; socket.create_connection((\"{archive}\", 80), 10)'"
        )
        assert direct.returncode != 0 and "ConnectionRefusedError" in direct.stderr, direct
        # outside the cluster network: this machine's SSH reaches the hosts only through the bastion
        for host, address in HOSTS.items():
            with socket.socket() as sock:
                sock.settimeout(5)
                assert sock.connect_ex((address, 22)) != 0, f"{host}: SSH reached without the bastion"
        cluster.rendered = _render_inventory(cluster)
        cluster.first = "vm-first-" + time.strftime("%Y%m%dT%H%M%S")
        with forward_proxy(f"{SUBNET}.1") as proxy:
            cluster.apt_proxy, cluster.proxied = proxy.url, proxy.requests
            cluster.playbook(cluster.first)
            yield cluster
    finally:
        for run in cluster.runs:
            shutil.rmtree(REPO / "results" / run, ignore_errors=True)
        down = cluster.standin("down")
        assert down.returncode == 0, down.stderr


def _plays(output: str) -> dict[str, list[str]]:
    """{play name: the tasks that reported changed} from ansible-playbook's default output."""
    plays = {}
    for play in re.split(r"\nPLAY \[", output)[1:]:
        name = play.split("]", 1)[0]
        tasks = re.split(r"\nTASK \[", play)[1:]
        plays[name] = plays.get(name, []) + [
            task.split("]", 1)[0] for task in tasks if "\nchanged: [" in task
        ]
    return plays


def test_the_playbook_sets_up_bare_hosts_over_ssh_and_trains(vms):
    returncode, output, seconds = vms.runs[vms.first]
    print(f"first run over SSH: {seconds:.0f} s")
    assert returncode == 0, output[-6000:]
    # the inventory is Terraform's: a non-root user, cluster addresses as ansible_host, admin networks that do
    # not hold the controller
    assert (
        'ansible_user: "debian"' in vms.rendered and 'testbed_admin_cidrs: ["192.0.2.0/24"]' in vms.rendered
    )
    assert f'testbed_ssh_bastion: "debian@{BASTION}"' in vms.rendered, vms.rendered
    # the hosts reach no archive themselves: every package list and package came through the site's proxy
    fetched = [request for request in vms.proxied if "debian.org" in request]
    print(f"apt through the site's proxy: {len(fetched)} requests, e.g. {fetched[:2]}")
    assert any("/Packages" in request or "InRelease" in request for request in fetched), vms.proxied[:20]
    assert any(request.endswith(".deb") for request in fetched), vms.proxied[:20]
    results = REPO / "results" / vms.first
    experiment = read_json(results / "experiment.json")
    assert experiment["complete"] is True, experiment["incomplete_reason"]
    assert experiment["local_cluster"] is False
    # the same files as a local run's
    for peer in ("peer-01", "peer-02"):
        for name in ("config.json", "rounds.csv", "started.json", "steps.csv", "summary.json", "trainer.log"):
            assert (results / peer / name).is_file(), (peer, name)
        summary = read_json(results / peer / "summary.json")
        assert summary["complete"] is True and summary["steps"] > 0, summary
    # every host's clock was read against the controller's (containers share it: within a second)
    clocks = experiment["clocks"]
    assert set(clocks["offsets_s"]) == set(HOSTS), clocks
    assert all(abs(offset) < 1.0 for offset in clocks["offsets_s"].values()), clocks
    # chrony follows the inventory's server, and only it
    for host in HOSTS:
        sources = vms.ssh(host, "sudo chronyc -n sources")
        assert f"{SUBNET}.1" in sources.stdout and "debian.pool" not in sources.stdout, (host, sources)
    # `trainer report` reads them
    shutil.copytree(results, vms.work / "results" / vms.first, dirs_exist_ok=True)
    command = [str(BIN / "trainer"), "report", str(vms.work / "results"), "--out", str(vms.work / "report")]
    report = subprocess.run(
        command, env=environment(), capture_output=True, text=True, timeout=300, check=False
    )
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    assert vms.first in (vms.work / "report" / "experiments.csv").read_text()


def test_the_first_run_waited_for_the_first_boots_dpkg_lock(vms):
    _, output, _ = vms.runs[vms.first]
    said = " ".join(output.split())  # "waited for the first boot: peer-01: dpkg's lock 34 s; ..."
    lock = r"(?:peer-\d+|monitor): dpkg'{1,2}s lock (\d+) s"
    waited = [int(seconds) for seconds in re.findall(lock, said)]
    print("dpkg's lock waited for, per host:", waited)
    assert len(waited) == len(HOSTS) and max(waited) > 0, output[-4000:]


def test_a_ddp_run_trains_over_ssh_its_ranks_on_the_cluster_addresses(vms):
    """A collective strategy over SSH on hosts whose name resolves to 127.0.1.1: gloo is given the interface
    of the cluster address, so every rank reaches the others there."""
    run = "vm-ddp-" + time.strftime("%Y%m%dT%H%M%S")
    done = vms.playbook(run, strategy="ddp", max_steps=30)
    print(f"ddp run over SSH: {vms.runs[run][2]:.0f} s")
    assert done.returncode == 0, done.output[-6000:]
    for peer in ("peer-01", "peer-02"):
        summary = read_json(REPO / "results" / run / peer / "summary.json")
        details = summary["strategy_details"]
        assert summary["complete"] is True and summary["steps"] == 30, summary
        assert details["rendezvous"] == f"{HOSTS['peer-01']}:29500", details
        assert details["gloo_address"] == HOSTS[peer], details


def test_a_collective_run_whose_rank_fails_stops_at_once_naming_it(vms):
    """peer-02's rank killed as it starts: rank 0 would wait in the rendezvous for the start timeout (300 s);
    the playbook notices within a poll, stops it (SIGKILL after 10 s: it is blocked in gloo's rendezvous)
    and its one message names the failed rank."""
    run = "vm-ddp-rank-lost-" + time.strftime("%Y%m%dT%H%M%S")
    done = vms.playbook(run, strategy="ddp", faults="kill:peer-02@start", start_timeout=300)
    said = " ".join(done.output.split())
    waits = [int(seconds) for seconds in re.findall(r"after (\d+) s:", said)]
    print("the run's progress reports (s):", waits)
    assert done.returncode != 0
    assert waits and max(waits) < 60, said[-4000:]
    assert "peer-01: stopped because peer-02 failed" in said, said[-4000:]
    experiment = read_json(REPO / "results" / run / "experiment.json")
    assert (
        experiment["complete"] is False
        and "stopped because peer-02 failed" in experiment["incomplete_reason"]
    ), experiment["incomplete_reason"]


def test_the_wheelhouse_is_built_for_the_hosts_platform(vms):
    _, output, _ = vms.runs[vms.first]
    said = " ".join(output.split())
    assert "wheelhouse for Python 3.11, glibc 2.36, x86_64 (cp311)" in said, output[-3000:]
    # the wheelhouse the role built, named after the requirements, the installer and the target
    # (controller/wheelhouse.py)
    version = subprocess.run([uv_command(), "--version"], capture_output=True, text=True).stdout
    requirements = (REPO / "requirements" / "node.txt").read_text()
    name = Target().name(f"{requirements}\n{installer(version)}")
    directory = Path(re.search(r" wheels in (\S+), tags ", said).group(1))
    assert directory.parent.name == name, directory  # in the user's cache (trainer_wheelhouse_dir)
    wheels = [path.name for path in directory.glob("*.whl")]
    assert any(name.startswith("torch-2.14.1-cp311-cp311-manylinux") for name in wheels), wheels
    assert any(name.startswith(installer(version).replace("==", "-") + "-") for name in wheels), wheels
    # shipped to one host only, which served it to the other: both installed with uv
    shipped = _task_hosts(output, "trainer : Ship the wheelhouse with rsync")
    assert shipped == ["peer-01"], shipped
    installed = _task_hosts(output, "trainer : Install the pinned dependencies offline from the wheelhouse")
    peers = {host for host in HOSTS if host.startswith("peer-")}
    assert peers <= set(installed) <= set(HOSTS), installed  # every peer (and the DHT node's host, if any)
    for name in wheels:
        python, abi, platform = name[: -len(".whl")].split("-")[-3:]
        assert python.startswith(("cp311", "py3", "py2.py3", "cp3")) and abi in ("cp311", "abi3", "none"), (
            name
        )
        glibcs = [int(minor) for minor in re.findall(r"manylinux_2_(\d+)", platform)]
        assert platform == "any" or "x86_64" in platform, name
        assert not glibcs or min(glibcs) <= 36, name  # every wheel runs on Debian 12's glibc 2.36
    # nothing of the wheelhouse, the installer or its cache left on the hosts; the venv's files each once on
    # the disk (uv's cache, which they were linked from, removed)
    for host in installed:
        left = vms.ssh(host, "ls -d /opt/testbed/wheelhouse /opt/testbed/installer 2>/dev/null; true").stdout
        assert left.strip() == "", (host, left)
        linked = vms.ssh(host, "find /opt/testbed/venv -type f -links +1 | head -3").stdout
        assert linked.strip() == "", (host, linked)
        assert (
            "2.14.1"
            in vms.ssh(
                host, "/opt/testbed/venv/bin/python -c 'import torch; print(torch.__version__)'"
            ).stdout
        )


def _task_hosts(output: str, task: str) -> list[str]:
    """The hosts a task of the playbook's output ran on (skipped hosts are not shown: ansible.cfg)."""
    text = output.split(f"TASK [{task}]", 1)[1].split("\nTASK [", 1)[0]
    return sorted(set(re.findall(r"^(?:ok|changed): \[([^\]\s]+)", text, re.MULTILINE)))


def _play_text(output: str, prefix: str) -> str:
    return "".join(play for play in re.split(r"\nPLAY \[", output)[1:] if play.startswith(prefix))


def test_a_second_run_skips_converged_set_up_reinstalls_a_removed_trainer_and_trains_on_shaped_links(vms):
    """The set-up plays skip hosts they converged for this checkout, except where something was changed by
    hand: the trainer package removed from peer-02 is installed again there, and only there."""
    pip = "sudo /opt/testbed/venv/bin/python -m pip"
    removed = vms.ssh("peer-02", f"{pip} uninstall --yes --quiet testbed-trainer")
    assert removed.returncode == 0, removed.stderr
    second = "vm-second-" + time.strftime("%Y%m%dT%H%M%S")
    done = vms.playbook(second, bandwidth_mbit=50)
    print(f"second run over SSH: {vms.runs[second][2]:.0f} s")
    assert done.returncode == 0, done.output[-6000:]
    plays = _plays(done.output)
    for play in SETUP_PLAYS:
        matching = [name for name in plays if name.startswith(play)]
        assert matching, (play, list(plays))
        if play == "Install the trainer":
            continue
        for name in matching:
            assert plays[name] == [], f"set-up play {name!r} changed: {plays[name]}"
    trainer_play = _play_text(done.output, "Install the trainer")
    assert "changed: [peer-02]" in trainer_play, trainer_play[-3000:]
    assert "changed: [peer-01]" not in trainer_play, trainer_play[-3000:]
    back = vms.ssh("peer-02", f"{pip} show --quiet testbed-trainer")
    assert back.returncode == 0, back.stderr
    experiment = read_json(REPO / "results" / second / "experiment.json")
    assert experiment["complete"] is True, experiment["incomplete_reason"]
    # the peers' traffic was shaped to 50 Mbit/s (the bandwidth probe between them measured it) ...
    measured = float(experiment["network"]["bandwidth_bytes_per_second"]) * 8 / 1e6
    assert 25 < measured < 55, experiment["network"]


def test_shaping_never_slows_the_controllers_ssh(vms):
    """With peer-01's link shaped to 5 Mbit/s by the role, 10 MB from it over the controller's SSH (through
    the bastion, an address in the cluster network) take well under the 16 s the shaped class would need."""
    adhoc = [str(BIN / "ansible"), "peer-01", "-i", str(vms.inventory), "--private-key", str(vms.key),
             "--become",
             "-e", vms.known_hosts, "-m", "ansible.builtin.include_role"]  # fmt: skip

    def role(args: str) -> None:
        done = subprocess.run([*adhoc, "-a", args, "-e", "link_shaping_bandwidth_mbit=5"], cwd=REPO,
                              env=environment(), capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]

    role("name=link_shaping")
    try:
        qdiscs = vms.ssh("peer-01", "/usr/sbin/tc qdisc show; /usr/sbin/tc filter show dev eth0").stdout
        assert "qdisc htb 1: dev eth0 root" in qdiscs and "parent 1:10 rate 5Mbit" in qdiscs, qdiscs
        # the cluster's traffic is shaped: 1 MB to peer-02 over TCP takes over a second at 5 Mbit/s
        receive = f"python3 -c '{RECEIVE}'"
        open_port = "sudo iptables -I TESTBED 1 -p tcp --dport 8099 -j ACCEPT"
        listen = vms.ssh_command("peer-02", f"{open_port}; {receive}")
        server = subprocess.Popen(listen, stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        started = time.monotonic()
        sent = vms.ssh(
            "peer-01",
            f"head -c 1000000 /dev/zero | python3 -c '{SEND % HOSTS['peer-02']}'",
        )
        out, _ = server.communicate(timeout=60)
        cluster_seconds = time.monotonic() - started
        vms.ssh("peer-02", "sudo iptables -D TESTBED -p tcp --dport 8099 -j ACCEPT")
        assert sent.returncode == 0 and out.strip() == "1000000", (sent, out)
        assert cluster_seconds > 1.2, f"1 MB between peers in {cluster_seconds:.2f} s: not shaped to 5 Mbit/s"
        # ... the controller's SSH is not
        started = time.monotonic()
        copied = subprocess.run(vms.ssh_command("peer-01", "head -c 10000000 /dev/urandom"),
                                capture_output=True, timeout=120, check=False)  # fmt: skip
        ssh_seconds = time.monotonic() - started
        assert len(copied.stdout) == 10_000_000, copied.stderr
        assert ssh_seconds < 8, f"10 MB over SSH took {ssh_seconds:.1f} s: the controller's SSH was shaped"
    finally:
        role("name=link_shaping tasks_from=remove")


def test_bad_input_stops_before_anything_trains_naming_the_host_and_the_fix(vms):
    first = REPO / "results" / vms.first / "experiment.json"
    before = first.read_bytes()
    # a wrong key
    other = vms.work / "other_key"
    other.unlink(missing_ok=True)
    other.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    # a user without sudo
    for host in HOSTS:
        vms.ssh(
            host,
            "sudo useradd -m nosudo && sudo cp -r ~/.ssh /home/nosudo/ && sudo chown -R nosudo ~nosudo/.ssh",
        )
    # an unreachable host: peer-02's address is one nobody answers at
    unreachable = vms.work / "unreachable"
    unreachable.mkdir(exist_ok=True)  # a rerun finds it
    if not (unreachable / "group_vars").exists():
        (unreachable / "group_vars").symlink_to(REPO / "inventories" / "opennebula" / "group_vars")
    text = (vms.inventory / "hosts.yml").read_text()
    (unreachable / "hosts.yml").write_text(
        text.replace(f'ansible_host: "{HOSTS["peer-02"]}"', f'ansible_host: "{SUBNET}.199"')
    )
    # the runs at once: each stops in its first plays. Those that wait on an address nobody answers at or a
    # refused key wait out the reach timeout: 60 s instead of the cloud inventory's 240 s (a VM still
    # booting), the message the same; root's login on a cloud image names the image's user at once
    short_reach = ("-e", "testbed_reach_timeout=60")
    with ThreadPoolExecutor(max_workers=6) as pool:
        key_run = pool.submit(
            run_playbook, "experiment.yml", "-i", str(vms.inventory), "--private-key", str(other),
            "-e", json.dumps({**RUN, "experiment_id": "vm-bad-key"}), "-e", vms.known_hosts, *short_reach,
            timeout=300,
            # its own SSH master connections (the earlier runs' persist with the key)
            env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(vms.work / "cp")},
        )  # fmt: skip
        sudo_run = pool.submit(vms.playbook, "vm-bad-sudo", "-e", "ansible_user=nosudo")
        host_run = pool.submit(vms.playbook, "vm-bad-host", *short_reach, inventory=unreachable)
        # an apt proxy nobody answers at (the controller's address, a closed port)
        proxy_run = pool.submit(vms.playbook, "vm-bad-proxy", "-e", f"apt_source_proxy=http://{SUBNET}.1:9")
        # a bastion nobody answers at; root, whose login the cloud image refuses
        bastion_run = pool.submit(
            vms.playbook, "vm-bad-bastion", "-e", f"testbed_ssh_bastion=debian@{SUBNET}.199", *short_reach
        )
        root_run = pool.submit(vms.playbook, "vm-bad-user", "-e", "ansible_user=root")
        wrong_key, no_sudo, gone = key_run.result(), sudo_run.result(), host_run.result()
        bad_proxy, bad_bastion, as_root = proxy_run.result(), bastion_run.result(), root_run.result()
    for done, says in (
        (wrong_key, r"peer-0[12]: debian@10\.89\.74\.10[12] refused the key: log in with the key"),
        (no_sudo, r"nosudo@10\.89\.74\.\d+ cannot become root .*passwordless sudo"),
        (
            gone,
            rf"peer-02: the bastion debian@{SUBNET}\.9 cannot reach debian@{SUBNET}\.199 "
            r".*check that it runs",
        ),
        (
            bad_bastion,
            rf"peer-0[12]: cannot log in to the bastion debian@{SUBNET}\.199 .*check testbed_ssh_bastion",
        ),
        (
            as_root,
            rf'peer-0[12]: root@{SUBNET}\.10[12] refuses this login and says to log in as the user "debian"',
        ),
        (
            bad_proxy,
            rf"apt_source: peer-0[12] cannot fetch the package lists through proxy http://{SUBNET}\.1:9 "
            r"\(.+\): check apt_source_proxy / apt_source_mirror in the inventory",
        ),
    ):
        said = " ".join(done.output.split())  # the messages as one line (the YAML output folds them)
        found = re.search(says, said)
        print(said[found.start() : found.start() + 300] if found else said[-1500:])
        assert done.returncode != 0
        assert found, done.output[-4000:]
        assert "PLAY [Close every host by default" not in done.output  # nothing was set up or started
    for run in ("vm-bad-key", "vm-bad-sudo", "vm-bad-host", "vm-bad-proxy", "vm-bad-bastion", "vm-bad-user"):
        assert not (REPO / "results" / run).exists(), run
    # with the cloud inventory's 240 s to reach a host, the refused root login ended the run well before
    assert vms.runs["vm-bad-user"][2] < 180, vms.runs["vm-bad-user"][2]
    assert first.read_bytes() == before  # results already written are untouched


def test_no_port_is_open_from_outside_and_the_controller_still_connects(vms, tmp_path):
    """The outside scan, on hosts whose SSH is open only to admin_cidrs (which do not hold the controller):
    from a neighbour outside, every TCP port and the 100 most common UDP ports are closed, SSH included;
    the controller, whose SSH address the firewall's safety net added, still logs in."""
    names = [f"{PREFIX}{host}" for host in HOSTS]
    with outside_namespace(SUBNET) as outside, icmp_unlimited(names):
        scan = port_scan(outside, list(HOSTS.values()), tmp_path)
    print("port scan from outside:", json.dumps(scan, indent=1))
    assert set(scan) == set(HOSTS.values()), scan
    for address, ports in scan.items():
        assert set(ports.values()) == {"closed"}, (address, ports)
    for host in HOSTS:
        ssh_rules = vms.ssh(host, "sudo iptables -S TESTBED | grep -- '--dport 22'").stdout.splitlines()
        # the admin network, and the address the controller's SSH came from (SSH_CLIENT): the bastion's
        assert sorted(rule.split()[3] for rule in ssh_rules) == sorted(["192.0.2.0/24", f"{BASTION}/32"]), (
            ssh_rules
        )
        assert vms.ssh(host, "echo in").stdout.strip() == "in", host
