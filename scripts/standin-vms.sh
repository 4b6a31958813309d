#!/usr/bin/env bash
# Stand-ins for fresh OpenNebula VMs on this machine (docs/real-vms.md): podman containers from the bare base
# image (debootstrap minbase: Debian 12, python3, sudo, systemd as PID 1) plus what contextualization gives a
# cloud VM and nothing else: openssh-server, a non-root user with passwordless sudo (`debian`, as on Debian's
# genericcloud image) and an authorized key. Nothing of the testbed is inside: no trainer, no venv, no torch.
# Each has its own address on a podman network of its own; the playbook reaches them only over SSH.
#
# Usage: scripts/standin-vms.sh up PEERS [DIR]   create peer-01..peer-PEERS and monitor; write into DIR (default
#                                                .cache/standin-vms) the SSH key pair and hosts.tfvars.json, the
#                                                addresses for infra/envs/standin (Terraform renders the inventory)
#        scripts/standin-vms.sh down              remove the containers and the network
# Environment: STANDIN_PREFIX (container names, default testbed-vm-), STANDIN_NETWORK (default testbed-vms),
#              STANDIN_SUBNET_PREFIX (the /24's first three octets, default 10.89.72), STANDIN_USER (default debian),
#              STANDIN_VCPUS / STANDIN_MEMORY_MB (each host's container limits, defaults 1 / 4096),
#              STANDIN_CLOUD_IMAGE=1: behave as Debian's cloud image does after its first boot (root's login refused
#              with the image's message, the host name resolving to 127.0.1.1 in /etc/hosts, and a first-boot job
#              holding dpkg's lock for STANDIN_FIRST_BOOT_SECONDS, default 45, after sshd is up, as cloud-init's
#              package installs and unattended-upgrades do),
#              STANDIN_OFFLINE=1: the hosts open no connection beyond their network but to this machine (its address
#              on the network, .1), as VMs without internet whose site runs a package proxy there; replies to
#              connections from outside still pass,
#              STANDIN_BASTION=1: the hosts reached only through a bastion (a host `bastion` at .9 with the same user
#              and key, written to hosts.tfvars.json as ssh_bastion): this machine's own SSH to the other hosts is
#              refused, as from a controller outside the cluster network.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/images/containers.conf}
prefix=${STANDIN_PREFIX:-testbed-vm-}
network=${STANDIN_NETWORK:-testbed-vms}
subnet_prefix=${STANDIN_SUBNET_PREFIX:-10.89.72}
user=${STANDIN_USER:-debian}
cloud_image=${STANDIN_CLOUD_IMAGE:-0}
first_boot_seconds=${STANDIN_FIRST_BOOT_SECONDS:-45}
vcpus=${STANDIN_VCPUS:-1}
memory_mb=${STANDIN_MEMORY_MB:-4096}
offline=${STANDIN_OFFLINE:-0}
bastion=${STANDIN_BASTION:-0}
base_image=localhost/testbed-base:bookworm
label=testbed.standin=$prefix

log() { echo "[standin-vms] $*" >&2; }

# STANDIN_OFFLINE's rule: new connections from the hosts to anything outside their /24 refused (this machine's
# own address on it is their gateway, reached through INPUT, not FORWARD)
offline_rule=(FORWARD -s "$subnet_prefix.0/24" ! -d "$subnet_prefix.0/24" -m conntrack --ctstate NEW
  -m comment --comment "testbed standin $network offline" -j REJECT)
# STANDIN_BASTION's rules: this machine's SSH to every host but the bastion refused
bastion_rules=("OUTPUT -d $subnet_prefix.0/24 -p tcp --dport 22 -m comment --comment testbed-standin-$network-bastion -j REJECT --reject-with tcp-reset"
  "OUTPUT -d $subnet_prefix.9 -p tcp --dport 22 -m comment --comment testbed-standin-$network-bastion -j ACCEPT")

down() {
  local names
  names=$(podman ps --all --format '{{ .Names }}' --filter "label=$label")
  # shellcheck disable=SC2086  # one name per word
  [ -z "$names" ] || podman rm --force --time 0 $names >/dev/null
  podman network rm --force "$network" >/dev/null 2>&1 || true
  while iptables -D "${offline_rule[@]}" 2>/dev/null; do :; done
  local rule
  # shellcheck disable=SC2086  # each rule is its words
  for rule in "${bastion_rules[@]}"; do while iptables -D $rule 2>/dev/null; do :; done; done
  log "removed ${names:-no containers} and network $network"
}

# What a cloud image's contextualization leaves: sshd running, the user with the key and passwordless sudo;
# with STANDIN_CLOUD_IMAGE=1 also what Debian's cloud image does besides (see the usage above).
contextualize() {
  local name=$1 key=$2 host=$3
  podman exec -i "$name" bash -euo pipefail -s "$user" "$key" "$host" "$cloud_image" "$first_boot_seconds" <<'EOF'
user=$1 key=$2 host=$3 cloud_image=$4 first_boot_seconds=$5
systemctl is-system-running --wait >/dev/null || true
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
install -d -m 700 -o "$user" -g "$user" "/home/$user/.ssh"
printf '%s\n' "$key" >"/home/$user/.ssh/authorized_keys"
chown "$user:$user" "/home/$user/.ssh/authorized_keys"
chmod 600 "/home/$user/.ssh/authorized_keys"
printf '%s ALL=(ALL) NOPASSWD:ALL\n' "$user" >/etc/sudoers.d/90-cloud-init-users
chmod 440 /etc/sudoers.d/90-cloud-init-users
systemctl enable --now ssh >/dev/null 2>&1
[ "$cloud_image" = 1 ] || exit 0
# cloud-init's disable_root: root's key logs in only to be told which user to log in as
install -d -m 700 /root/.ssh
printf 'no-port-forwarding,no-agent-forwarding,no-X11-forwarding,command="echo '\''Please login as the user \\\"%s\\\" rather than the user \\\"root\\\".'\'';echo;sleep 1;exit 142" %s\n' \
  "$user" "$key" >/root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
# cloud-init's /etc/hosts template: the host name on 127.0.1.1, not on the cluster address
printf '127.0.1.1 %s.localdomain %s\n127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' \
  "$host" "$host" >/etc/hosts
# the first boot's package work: dpkg's locks held (as apt takes them, fcntl) for a while after sshd is up
if [ "$first_boot_seconds" -gt 0 ]; then
  systemd-run --quiet --collect --unit testbed-first-boot python3 -c 'import fcntl, sys, time
locks = [open(path, "a") for path in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")]
for lock in locks:
    fcntl.lockf(lock, fcntl.LOCK_EX)
time.sleep(float(sys.argv[1]))' "$first_boot_seconds"
fi
EOF
}

up() {
  local peers=${1:?usage: standin-vms.sh up PEERS [DIR]} dir=${2:-.cache/standin-vms}
  [[ $peers =~ ^[1-9][0-9]?$ ]] || { log "PEERS must be 1-99, not '$peers'"; exit 2; }
  podman image exists "$base_image" || images/build.sh base
  mkdir -p "$dir"
  [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C testbed-standin -f "$dir/id_ed25519"
  local key
  key=$(cat "$dir/id_ed25519.pub")
  down
  podman network create --subnet "$subnet_prefix.0/24" "$network" >/dev/null
  local hosts=(monitor) index
  for index in $(seq 1 "$peers"); do hosts+=("$(printf 'peer-%02d' "$index")"); done
  [ "$bastion" != 1 ] || hosts+=(bastion)
  local host address rule mounts=(-v "$(scripts/cgroup-volume.sh)") hosts_option=()
  # a cloud image writes its own /etc/hosts (contextualize); podman's would map the name to the address
  [ "$cloud_image" != 1 ] || hosts_option=(--no-hosts)
  # this machine's CA bundle beside the image's own (not over it: the ca-certificates package rewrites that file),
  # for the index path through this machine's proxy: trainer_pip_environment={"PIP_CERT": "/etc/testbed-host-ca.crt"}
  if [ -e /etc/ssl/certs/ca-certificates.crt ]; then
    mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/testbed-host-ca.crt:ro)
  fi
  for host in "${hosts[@]}"; do
    address=$(standin_address "$host")
    # NET_ADMIN: a VM's root may change its firewall and qdiscs (roles cluster_firewall, link_shaping)
    podman run -d --name "$prefix$host" --hostname "$host" --label "$label" --network "$network" --ip "$address" \
      "${hosts_option[@]}" --cpus "$vcpus" --memory "${memory_mb}m" --shm-size 1g --cap-add NET_ADMIN "${mounts[@]}" \
      "$base_image" /lib/systemd/systemd >/dev/null
  done
  local pids=()
  for host in "${hosts[@]}"; do contextualize "$prefix$host" "$key" "$host" & pids+=($!); done
  for index in "${!pids[@]}"; do wait "${pids[$index]}" || { log "contextualizing ${hosts[$index]} failed"; exit 1; }; done
  # the image is made (openssh-server came from the archive); from here on the hosts are offline
  [ "$offline" != 1 ] || iptables -I "${offline_rule[@]}"
  if [ "$bastion" = 1 ]; then  # inserted in this order: the bastion's ACCEPT above the REJECT
    # shellcheck disable=SC2086  # each rule is its words
    for rule in "${bastion_rules[@]}"; do iptables -I $rule; done
  fi
  write_tfvars "$dir/hosts.tfvars.json" "$peers"
  local as_cloud=""
  [ "$cloud_image" != 1 ] || as_cloud=", as a cloud image (root refused, name on 127.0.1.1, dpkg locked ${first_boot_seconds} s)"
  [ "$offline" != 1 ] || as_cloud="$as_cloud, without internet (only $subnet_prefix.1 beyond the network)"
  [ "$bastion" != 1 ] || as_cloud="$as_cloud, SSH only through the bastion $user@$subnet_prefix.9"
  log "up: ${hosts[*]} on $network ($subnet_prefix.0/24), user $user, key $dir/id_ed25519$as_cloud"
}

standin_address() {
  case $1 in
    bastion) echo "$subnet_prefix.9" ;;
    monitor) echo "$subnet_prefix.10" ;;
    peer-*) echo "$subnet_prefix.$((100 + 10#${1#peer-}))" ;;
  esac
}

# The addresses as OpenNebula's VMs would give them to infra/modules/ansible_inventory: ansible_host is the
# cluster address (as infra/modules/cluster makes it); admin_cidrs a documentation network that does not hold
# the controller, so that only the firewall's SSH safety net keeps the controller in.
write_tfvars() {
  local out=$1 peers=$2 index host entries=()
  for index in $(seq 1 "$peers"); do
    host=$(printf 'peer-%02d' "$index")
    entries+=("{\"name\": \"$host\", \"ansible_host\": \"$(standin_address "$host")\", \"cluster_address\": \"$(standin_address "$host")\", \"vcpus\": $vcpus, \"memory_mb\": $memory_mb}")
  done
  local joined ports jump=null
  [ "$bastion" != 1 ] || jump="\"$user@$(standin_address bastion)\""
  joined=$(IFS=,; echo "${entries[*]}")
  # the testbed's ports: the local inventory's testbed_ports, their one list on this machine
  ports=$(python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))["testbed_ports"]))' \
    inventories/local/group_vars/all/cluster.yml) || { log "cannot read testbed_ports (needs python3 with PyYAML: the venv)"; exit 1; }
  cat >"$out" <<EOF
{
  "ssh_user": "$user",
  "cluster_cidr": "$subnet_prefix.0/24",
  "admin_cidrs": ["192.0.2.0/24"],
  "ssh_bastion": $jump,
  "ports": $ports,
  "peers": [$joined],
  "monitor": {"ansible_host": "$(standin_address monitor)", "cluster_address": "$(standin_address monitor)", "vcpus": $vcpus, "memory_mb": $memory_mb}
}
EOF
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
