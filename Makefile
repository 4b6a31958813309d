# Entry points (README.md): `make demo` installs everything and runs the main job on the embedded local cluster,
# `make test` runs every check. The other targets are their parts.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
export CONTAINERS_CONF := $(CURDIR)/images/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# the bind mount systemd in a local container needs on this host (hybrid cgroup v1 or v2), for Molecule's scenarios
export TESTBED_CGROUP_VOLUME := $(shell scripts/cgroup-volume.sh)
# Python keeps what it compiles (this checkout's modules, pytest's rewritten test files; __pycache__ is ignored
# by git and by the converged hosts' fingerprints): where PYTHONDONTWRITEBYTECODE is set, as on this project's
# machines, every pytest process compiled every test file again (about 2 s of CPU per collection, and `make test`
# collects about a dozen times)
unexport PYTHONDONTWRITEBYTECODE

# Debian packages the project needs on the controller (containers, base image, test Ceph, Prometheus, data,
# nmap for the port scan of tests/e2e, iperf3 for the fault agent's tests, OpenMPI with Debian Python's mpi4py and
# NumPy for the MPI rows of benchmarks/allreduce_micro.py: python3-mpi4py only suggests NumPy).
APT_PACKAGES := python3-venv python3-pip podman fuse-overlayfs uidmap slirp4netns debootstrap crun \
	prometheus prometheus-node-exporter dataset-fashion-mnist \
	ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common fuse3 rsync jq iproute2 nmap iperf3 \
	openmpi-bin python3-mpi4py python3-numpy

# `make demo`: 8 peers, ResNet18 on Fashion-MNIST, a few Hivemind epochs, time-dilated (time_dilation=auto): each
# container trains at its 2 vCPUs' calibrated rate / D, D the smallest factor at which all eight fit the cores left
# to them (docs/compute-calibration.md); matchmaking_time and averaging_timeout are the modelled VMs' seconds, each
# applied D times longer, and every link is shaped to 1 Gbit/s / D (docs/time-dilation.md). A run's D and duration
# on this machine are in the README's example, written from that run's records (scripts/readme_example.py).
DEMO_VARS ?= -e peers=8 -e model=resnet18 -e dataset=fashion-mnist -e max_steps=50 -e batch_size=32 \
	-e target_batch_size=2048 -e matchmaking_time=3 -e averaging_timeout=60 -e progress_interval=30

# Debian packages the guests need (scripts/guest-vms.sh, images/cloud-image.sh): qemu, the image's builder, the
# CONTEXT ISO's writer.
GUEST_PACKAGES := qemu-system-x86 qemu-utils mmdebstrap e2fsprogs xorriso

.PHONY: help setup apt cgroups venv controller image demo test test-extended test-cluster lint pytest molecule clean \
	guest-tools guests

help:
	@echo "make demo   install everything, then run playbooks/experiment.yml with 8 peers on the local cluster"
	@echo "make test   make setup if needed, then lint (ruff, yamllint, ansible-lint, terraform fmt) and every test but those marked extended"
	@echo "make test-extended  the tests make test leaves out for their cost (marker extended, docs/development.md)"
	@echo "make test-cluster  only the tests that start the local cluster or real peers (marker cluster)"
	@echo "make molecule  the local images, then every role's Molecule scenarios"
	@echo "make setup  apt packages, $(VENV)/ and the local images;  make clean  remove the local cluster"
	@echo "make controller  only what the controller of real VMs needs (Ansible, trainer grid/report; no torch, no root)"
	@echo "make guests  qemu guests booted from a cloud image as OpenNebula boots VMs (PEERS=2; docs/real-vms.md)"
	@echo "make wheelhouse  the trainer's dependencies as wheels for VMs without internet (docs/real-vms.md)"

setup: apt cgroups venv image infra-setup

# crun refuses hybrid cgroups when the hugetlb controller sits in the v2 hierarchy (seen on this machine kind):
# give it its own v1 hierarchy, as the other controllers have. Does nothing where that is already so.
cgroups:
	if ! grep -q ' /sys/fs/cgroup/hugetlb cgroup ' /proc/mounts \
	  && grep -qw hugetlb /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then \
	  mkdir -p /sys/fs/cgroup/hugetlb && mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb; \
	fi

# The local cluster's host: Debian 12 as root (its images are debootstrapped from the host's Debian archive, its
# packages come from Debian's archive); anything else is refused here, before a package is installed. The
# controller of real VMs needs neither: `make controller`.
apt:
	@. /etc/os-release 2>/dev/null; if [ "$${ID:-}:$${VERSION_ID:-}" != debian:12 ]; then \
	  echo "make: the local cluster needs Debian 12 as root; this host is $${PRETTY_NAME:-unknown}" \
	    "(for real VMs only the controller is needed: make controller)"; exit 2; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "make: the local cluster's set-up needs root (apt, podman, Ceph): run it as root" \
	  "(for real VMs only the controller is needed, as any user: make controller)"; exit 2; fi
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${db:Status-Status}\n' $$p 2>/dev/null \
	  | grep -qx installed || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(VENV)/.setup-done

guest-tools: apt
	@missing=$$(for p in $(GUEST_PACKAGES); do dpkg-query -W -f='$${db:Status-Status}\n' $$p 2>/dev/null \
	  | grep -qx installed || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# monitor and PEERS peers as qemu guests, their inventory rendered by infra/envs/guests
PEERS ?= 2
guests: guest-tools venv
	scripts/guest-vms.sh up $(PEERS)
	mkdir -p .cache/guest-vms/inventory
	ln -sfn $(CURDIR)/inventories/opennebula/group_vars .cache/guest-vms/inventory/group_vars
	infra/write-inventory.sh infra/envs/guests .cache/guest-vms/inventory/hosts.yml

# uv installs under pip's configuration (scripts/uv_pip_install.py): it unpacks and compiles in parallel, where
# pip takes one core (benchmarks/wheelhouse_install.py compares them). Every module is compiled at install:
# needed where PYTHONDONTWRITEBYTECODE is set (as on this project's machines), else every process compiles what
# it imports, each time (--no-compile made CI 20-30 % slower)
UV_VERSION := 0.13.9
$(VENV)/.setup-done: requirements/dev.txt requirements/controller.txt pyproject.toml scripts/uv_pip_install.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	$(PY) scripts/uv_pip_install.py --python $(PY) --quiet -r requirements/dev.txt -e .
	touch $@

# The controller alone, where Terraform and Ansible run against real VMs (a laptop, docs/real-vms.md): Ansible,
# ansible-runner and the report's plotting in .venv, and this checkout's `trainer grid` and `trainer report`
# without the trainer's own dependencies (torch, Hivemind, DeepSpeed go to the VMs). No root, no apt: it needs
# Python >= 3.11 with venv, rsync and ssh, and says which is missing.
controller: $(VENV)/.controller-done

$(VENV)/.controller-done: requirements/controller.txt pyproject.toml scripts/uv_pip_install.py
	@if [ -f $(VENV)/.setup-done ] && [ $(VENV)/.setup-done -nt requirements/controller.txt ]; then \
	  touch $@; exit 0; fi; \
	for tool in rsync ssh python3; do command -v $$tool >/dev/null \
	  || { echo "make controller: $$tool is missing (Debian: apt install rsync openssh-client python3-venv)"; exit 1; }; done; \
	python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' \
	  || { echo "make controller: needs Python >= 3.11 with venv; python3 is $$(python3 -V 2>&1)"; exit 1; }; \
	set -x; test -x $(PY) || python3 -m venv $(VENV); \
	$(PY) -m pip install --quiet uv==$(UV_VERSION); \
	$(PY) scripts/uv_pip_install.py --python $(PY) --quiet -r requirements/controller.txt; \
	$(PY) scripts/uv_pip_install.py --python $(PY) --quiet --no-deps -e .; \
	touch $@

image: apt venv
	images/build.sh all

demo: setup
	ansible-playbook playbooks/experiment.yml $(DEMO_VARS)

lint: venv
	ruff check .
	ruff format --check .
	yamllint --strict .
	ansible-lint --profile production roles/ playbooks/ inventories/ images/node-dependencies.yml
	if ! command -v terraform >/dev/null; then echo "lint: terraform is not on PATH: terraform fmt skipped"; \
	elif [ -d infra ]; then terraform fmt -check -recursive infra; fi

# Two passes: the tests that share nothing run on 2 workers (pytest-xdist, a file per worker); those that start
# containers, peers or Hivemind, or time things, run one at a time. Both passes run; either failing fails.
SERIAL_TESTS := cluster or molecule or hivemind or slow
PARALLEL_PASS := pytest -n 2 --dist loadfile -m "not ($(SERIAL_TESTS))" tests/
SERIAL_PASS := pytest -m "$(SERIAL_TESTS)" tests/
pytest: setup
	status=0; \
	$(PARALLEL_PASS) || status=$$?; \
	$(SERIAL_PASS) || status=$$?; \
	exit $$status

# `make test`: the local images' build with the Molecule scenarios, run beside the parallel pass (none of them
# times anything), their output shown once all are done; then the rest of the serial pass (its tests time
# things or train dilated peers, and need the images): those on real peers alone, then the end-to-end tests in
# two lanes (SERIAL_ALONE, E2E_LANES below). The node image's scenarios run once it is built; those on the base
# image alone (marker base_image) once the parallel pass is done, beside the end of the node image's build (its
# commit keeps one core of two busy) and its scenarios: beside the parallel pass as well, they slowed the node
# image's Debian packages' install from 100 s to 150-215 s. The linters run beside the two
# lanes at the scheduler's idle priority (LINT_BESIDE: SCHED_IDLE, only the CPU the lanes leave; no container,
# no timeout), their output shown at the end: beside the parallel pass, where the two cores are busy, they
# cost that phase about 40 s; beside the tests on real peers, which left 0.6-0.8 of a core idle, those tests
# took longer. Any part failing fails. The images are built as
# `make image` does (nothing to do when they are current).
MOLECULE_BASE_PASS := pytest -m "molecule and base_image" tests/roles/test_molecule.py
MOLECULE_NODE_PASS := pytest -m "molecule and not (base_image or extended)" tests/roles/test_molecule.py
MOLECULE_PASS := images/build.sh node && $(MOLECULE_NODE_PASS)
# The rest of the serial pass: first the tests that time things or run real peers on this host, alone; then
# two lanes at once: the tests on the shared local cluster (marker local_cluster, set by tests/conftest.py),
# and beside them the real cluster's path on its stand-in VMs (marker stand_in_vms) and the tests on real peers
# and the benchmarks whose checks hold on a loaded host (marker load_tolerant: they time nothing of this host).
# Each lane has its own containers, podman network, inventory and outside namespace; alone, each ran at about
# one core of the two (Ansible's controller, module and SSH round trips, barrier and probe waits;
# `benchmarks/busy_by_test.py` measures it, docs/development.md). The second lane's output is shown once both
# are done. The load-tolerant tests marked local_lane run first in the local cluster's lane, so that the two
# lanes end together. The tests marked extended are left out (`make test-extended`).
SERIAL_ALONE := pytest -m "($(SERIAL_TESTS)) and not (molecule or local_cluster or stand_in_vms or load_tolerant or local_lane or guests or extended)" tests/
SECOND_LANE := pytest -m "(stand_in_vms or (($(SERIAL_TESTS)) and load_tolerant and not (local_cluster or local_lane))) and not extended" tests/
LOCAL_LANE := pytest -m "(local_cluster or local_lane) and not extended" tests/
E2E_LANES := second_log=$$(mktemp); \
	$(SECOND_LANE) > "$$second_log" 2>&1 & second=$$!; \
	echo "the stand-in VMs' tests and the load-tolerant ones run beside these; their output follows"; \
	$(LOCAL_LANE); lane=$$?; \
	wait $$second; second=$$?; cat "$$second_log"; rm -f "$$second_log"; \
	[ $$second = 0 ] || echo "the second lane (stand-in VMs, load-tolerant tests) failed"; \
	[ $$lane = 0 ] && exit $$second; exit $$lane
# The qemu guests' tests (marker guests) last and alone: emulated guests take every core they get. Their cloud
# image is built beside the parallel pass (images/cloud-image.sh; nothing to do when it is current).
GUESTS_PASS := pytest -m "guests and not extended" tests/
LINT_BESIDE := chrt --idle 0 $(MAKE) --no-print-directory lint
# Every pass of one `make test` records its chance observations under one session (tests/conftest.py), in
# test-results/observations/ (`python tests/observations.py` summarises the last sessions).
# The wheelhouse the stand-in VMs' test installs from (`make wheelhouse`, the role's defaults: the one its first
# run would build) is built beside the parallel pass, mostly a download, and is there when the lanes begin.
test: terraform-check apt cgroups venv infra-setup guest-tools
	export TESTBED_TEST_SESSION=$${TESTBED_TEST_SESSION:-$$(date -u +%Y%m%dT%H%M%SZ)}; \
	status=0; lint_log=$$(mktemp); molecule_log=$$(mktemp); base_log=$$(mktemp); wheelhouse_log=$$(mktemp); \
	cloud_log=$$(mktemp); \
	( $(MOLECULE_PASS) ) > "$$molecule_log" 2>&1 & molecule=$$!; \
	images/cloud-image.sh > "$$cloud_log" 2>&1 & cloud=$$!; \
	$(MAKE) --no-print-directory wheelhouse > "$$wheelhouse_log" 2>&1 & wheelhouse=$$!; \
	$(PARALLEL_PASS) || status=$$?; \
	wait $$cloud || { status=$$?; echo "images/cloud-image.sh failed:"; }; \
	cat "$$cloud_log"; rm -f "$$cloud_log"; \
	( images/build.sh base && $(MOLECULE_BASE_PASS) ) > "$$base_log" 2>&1 & base=$$!; \
	wait $$molecule || { status=$$?; echo "the image build or the node image's Molecule scenarios failed:"; }; \
	cat "$$molecule_log"; rm -f "$$molecule_log"; \
	wait $$base || { status=$$?; echo "the base image's Molecule scenarios failed:"; }; \
	cat "$$base_log"; rm -f "$$base_log"; \
	$(SERIAL_ALONE) || status=$$?; \
	wait $$wheelhouse || { status=$$?; echo "make wheelhouse failed:"; }; \
	cat "$$wheelhouse_log"; rm -f "$$wheelhouse_log"; \
	$(LINT_BESIDE) > "$$lint_log" 2>&1 & lint=$$!; \
	( $(E2E_LANES) ) || status=$$?; \
	wait $$lint || { status=$$?; echo "make lint failed:"; }; \
	cat "$$lint_log"; rm -f "$$lint_log"; \
	$(GUESTS_PASS) || status=$$?; \
	exit $$status

# The images (as `make image`) and every Molecule scenario.
molecule: apt cgroups venv
	images/build.sh all && pytest -m molecule tests/roles/test_molecule.py

# What `make test` leaves out for its cost (marker extended: benchmarks' runs at CI size, DiLoCo under churn on
# the local cluster, the test Ceph's Molecule scenario), one at a time; with `make test`, every test.
test-extended: setup
	pytest -m extended tests/

# The cluster-test tier alone: every test that starts the local cluster or real peers (marker `cluster`).
test-cluster: setup
	pytest -m cluster tests/

clean:
	ansible-playbook playbooks/teardown.yml
	rm -rf build/trainer-wheel

# --- infra/ (Terraform for OpenNebula; infra/README.md) ---------------------------------------------------
INFRA_ENV ?= infra/envs/example
.PHONY: infra-setup infra-test inventory terraform-check wheelhouse

# `make test` needs terraform (tests/infra, terraform fmt), which Debian does not package: said once, first.
terraform-check:
	@command -v terraform >/dev/null || { echo "make test: terraform (>= 1.9) is not on PATH; tests/infra and" \
	  "terraform fmt need it: install it from https://developer.hashicorp.com/terraform/install (one binary," \
	  "e.g. /usr/local/bin/terraform), or run the rest: .venv/bin/pytest --ignore=tests/infra tests/" >&2; exit 1; }

# The offline stand-in for the OpenNebula provider runs in its own venv (.cache/tf-stub-venv).
infra-setup:
	infra/testing/stub-venv.sh >/dev/null

# terraform fmt/validate/test and the Ansible hand-off, offline (needs terraform >= 1.9 on PATH).
infra-test: venv infra-setup
	pytest tests/infra

# The wheelhouse for VMs without internet (`-e trainer_dependency_source=wheelhouse`, docs/real-vms.md), built ahead
# of a run as the trainer role builds it when it is missing: for the target $(INVENTORY) names
# (trainer_wheelhouse_python, _glibc, _arch, _pip_args in its group_vars/all; Debian 12's by default), in the
# controller user's cache (trainer_wheelhouse_dir); nothing to do when it is there. It says which it built.
INVENTORY ?= inventories/opennebula
wheelhouse: controller
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/wheelhouse.yml

# After `terraform apply` in $(INFRA_ENV): write inventories/opennebula/hosts.yml from its output.
inventory: controller
	infra/write-inventory.sh $(INFRA_ENV) inventories/opennebula/hosts.yml
