#!/usr/bin/env bash
# Guests on this machine booted as OpenNebula boots its VMs (docs/real-vms.md, "Guests on this machine"): qemu VMs
# from the cloud image images/cloud-image.sh builds (each on a qcow2 overlay of it, virtio disk), one virtio NIC each
# on a bridge that stands for the cluster's virtual network (closed to the outside as the local cluster is: the
# guests reach this machine, its address on the bridge, and each other), and a CONTEXT CD-ROM whose context.sh holds
# what OpenNebula would write: the CONTEXT section infra/modules/vm_context renders (through infra/envs/guests, with
# Terraform) and the NIC's ETH0_* keys. cloud-init's OpenNebula datasource in the guest applies it. Nothing of the
# testbed is inside.
#
# Usage: scripts/guest-vms.sh up PEERS [DIR]   boot monitor and peer-01..peer-PEERS; write into DIR (default
#                                              .cache/guest-vms) the SSH key pair, hosts.tfvars.json (for
#                                              infra/envs/guests: Terraform renders the inventory) and per guest its
#                                              overlay, context.sh, CONTEXT ISO and serial console log
#        scripts/guest-vms.sh down              stop every guest; remove their taps, the bridge, the firewall rule
#                                              and the guests' overlays and ISOs (the key pair and logs stay)
# Environment: GUEST_VCPUS (each guest's vCPUs, default 1), GUEST_MEMORY_MB (default 2048), GUEST_DISK_GB (each
#              overlay's size, default 12), GUEST_BOOT_TIMEOUT (seconds until a guest takes the context user's SSH
#              login with cloud-init done, default 900), GUEST_SUBNET_PREFIX (the bridge's /24, default 10.89.80),
#              GUEST_USER (the context's USERNAME, default debian), GUEST_ACCEL (qemu's accelerator, default tcg:
#              this machine's /dev/kvm runs PVM guest kernels only, docs/real-vms.md).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
vcpus=${GUEST_VCPUS:-1}
memory_mb=${GUEST_MEMORY_MB:-2048}
disk_gb=${GUEST_DISK_GB:-12}
boot_timeout=${GUEST_BOOT_TIMEOUT:-900}
subnet_prefix=${GUEST_SUBNET_PREFIX:-10.89.80}
user=${GUEST_USER:-debian}
accel=${GUEST_ACCEL:-tcg}
bridge=tbguest0
name_prefix=testbed-guest-
env_dir=infra/envs/guests
# the bridge's rule: new connections from the guests to anything outside their /24 refused (this machine's own
# address on it, .1, is reached through INPUT, not FORWARD)
closed_rule=(FORWARD -s "$subnet_prefix.0/24" ! -d "$subnet_prefix.0/24" -m conntrack --ctstate NEW
  -m comment --comment "testbed guest-vms closed" -j REJECT)

log() { echo "[guest-vms] $*" >&2; }
fail() { log "$*"; exit 1; }

address() {
  case $1 in
    monitor) echo "$subnet_prefix.10" ;;
    peer-*) echo "$subnet_prefix.$((100 + 10#${1#peer-}))" ;;
  esac
}

# OpenNebula's MAC for an address: its prefix 02:00 and the IPv4 address's four bytes
mac_of() { local a b c d; IFS=. read -r a b c d <<<"$1"; printf '02:00:%02x:%02x:%02x:%02x' "$a" "$b" "$c" "$d"; }

guest_pids() {
  local pid
  for pid in $(pgrep -f "^qemu-system-x86_64 -name $name_prefix" || true); do echo "$pid"; done
}

down() {
  local pids dir=${1:-.cache/guest-vms}
  pids=$(guest_pids)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086  # one pid per word
    kill $pids 2>/dev/null || true
    local waited=0
    while [ -n "$(guest_pids)" ] && [ "$waited" -lt 50 ]; do sleep 0.2; waited=$((waited + 1)); done
    # shellcheck disable=SC2046  # one pid per word
    [ -z "$(guest_pids)" ] || kill -9 $(guest_pids) 2>/dev/null || true
  fi
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep '^tbg-' || true); do
    ip link del "${link%@*}" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  while iptables -D "${closed_rule[@]}" 2>/dev/null; do :; done
  rm -rf "$dir"/monitor/overlay.qcow2 "$dir"/peer-*/overlay.qcow2 "$dir"/*/context.iso "$dir"/*/context
}

check_fits() {
  local hosts=$1 dir=$2 need_mb available_mb free_mb
  need_mb=$((hosts * memory_mb))
  available_mb=$(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) / 1024))
  mkdir -p "$dir"
  free_mb=$(df -Pm "$dir" | awk 'NR == 2 {print $4}')
  local missing=()
  for tool in qemu-system-x86_64 qemu-img xorriso terraform ssh ip iptables; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ "${#missing[@]}" = 0 ] || fail "missing: ${missing[*]} (make guest-tools installs qemu and xorriso)"
  [ -c /dev/net/tun ] || fail "no /dev/net/tun: the guests' NICs need tap devices"
  # 2 GiB of this machine's memory kept beside the guests; a guest's overlay grows to a few GB with the trainer
  [ $((need_mb + 2048)) -le "$available_mb" ] \
    || fail "$hosts guests of $memory_mb MB need $need_mb MB and 2048 MB beside; $available_mb MB are available (GUEST_MEMORY_MB, fewer PEERS)"
  [ $((hosts * 4096)) -le "$free_mb" ] \
    || fail "$hosts guests need $((hosts * 4)) GB of disk under $dir; $free_mb MB are free"
}

write_tfvars() {
  local out=$1 peers=$2 key=$3 index host entries=() ports
  for index in $(seq 1 "$peers"); do
    host=$(printf 'peer-%02d' "$index")
    entries+=("{\"name\": \"$host\", \"ansible_host\": \"$(address "$host")\", \"cluster_address\": \"$(address "$host")\", \"vcpus\": $vcpus, \"memory_mb\": $memory_mb}")
  done
  ports=$(python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))["testbed_ports"]))' \
    inventories/local/group_vars/all/cluster.yml) || fail "cannot read testbed_ports (needs python3 with PyYAML: the venv)"
  cat >"$out" <<EOF
{
  "ssh_user": "$user",
  "ssh_public_keys": ["$key"],
  "cluster_cidr": "$subnet_prefix.0/24",
  "admin_cidrs": ["192.0.2.0/24"],
  "ports": $ports,
  "peers": [$(IFS=,; echo "${entries[*]}")],
  "monitor": {"ansible_host": "$(address monitor)", "cluster_address": "$(address monitor)", "vcpus": $vcpus, "memory_mb": $memory_mb}
}
EOF
}

# context.sh as OpenNebula writes it: one KEY='value' line each, the CONTEXT section's keys and the NIC's
write_context() {
  local host=$1 contexts=$2 out=$3 ip
  ip=$(address "$host")
  python3 - "$host" "$contexts" "$out" "$ip" "$(mac_of "$ip")" "$subnet_prefix" <<'EOF'
import json, sys
host, contexts, out, ip, mac, prefix = sys.argv[1:]
values = dict(json.loads(open(contexts).read())[host])
values.update(ETH0_IP=ip, ETH0_MAC=mac, ETH0_MASK="255.255.255.0", ETH0_NETWORK=f"{prefix}.0",
              ETH0_GATEWAY=f"{prefix}.1")
quoted = lambda value: "'" + str(value).replace("'", "'\\''") + "'"
with open(out, "w") as file:
    file.write("# Context variables generated by OpenNebula\n")
    file.writelines(f"{key}={quoted(value)}\n" for key, value in sorted(values.items()))
EOF
}

boot() {
  local host=$1 dir=$2 image_dir=$3 ip mac tap
  ip=$(address "$host")
  mac=$(mac_of "$ip")
  tap=tbg-$host
  ip tuntap add dev "$tap" mode tap
  ip link set "$tap" master "$bridge" up
  qemu-img create -q -f qcow2 -F qcow2 -b "$image_dir/debian-12-testbed.qcow2" "$dir/$host/overlay.qcow2" "${disk_gb}G"
  xorriso -as mkisofs -quiet -V CONTEXT -J -R -o "$dir/$host/context.iso" "$dir/$host/context" 2>/dev/null
  : >"$dir/$host/serial.log"
  local cpu=max
  [ "$accel" = tcg ] || cpu=host
  qemu-system-x86_64 -name "$name_prefix$host" -machine pc -accel "$accel" -cpu "$cpu" -smp "$vcpus" -m "$memory_mb" \
    -kernel "$image_dir/vmlinuz" -initrd "$image_dir/initrd.img" -append "root=/dev/vda rw console=ttyS0" \
    -drive "file=$dir/$host/overlay.qcow2,if=virtio,format=qcow2" -drive "file=$dir/$host/context.iso,media=cdrom" \
    -netdev "tap,id=net0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=net0,mac=$mac" \
    -display none -serial "file:$dir/$host/serial.log" -daemonize -pidfile "$dir/$host/qemu.pid"
}

# until the context's user logs in over SSH and cloud-init is done; else the serial console's last lines
wait_ready() {
  local host=$1 dir=$2 started=$3 ip
  ip=$(address "$host")
  local ssh=(ssh -i "$dir/id_ed25519" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    -o ConnectTimeout=5 -o LogLevel=ERROR "$user@$ip")
  while ! "${ssh[@]}" true 2>/dev/null; do
    if [ $((SECONDS - started)) -ge "$boot_timeout" ]; then
      log "$host ($ip) did not take $user's SSH login within ${boot_timeout} s; its serial console's last lines:"
      tail -n 25 "$dir/$host/serial.log" | sed "s/^/  $host | /" >&2
      return 1
    fi
    kill -0 "$(cat "$dir/$host/qemu.pid" 2>/dev/null)" 2>/dev/null || {
      log "$host's qemu exited; its serial console's last lines:"
      tail -n 25 "$dir/$host/serial.log" | sed "s/^/  $host | /" >&2
      return 1
    }
    sleep 5
  done
  # cloud-init may restart sshd once it is reached (255: ssh's own failure): ask again until it answers
  local status rc
  while :; do
    rc=0
    status=$("${ssh[@]}" cloud-init status --wait --long 2>&1) || rc=$?
    [ "$rc" = 255 ] && [ $((SECONDS - started)) -lt "$boot_timeout" ] || break
    sleep 2
  done
  if [ "$rc" != 0 ]; then
    log "$host: cloud-init did not finish cleanly:"
    sed "s/^/  $host | /" <<<"$status" >&2
    return 1
  fi
  log "$host ($ip): $user logged in, cloud-init done, $((SECONDS - started)) s after qemu started"
}

up() {
  local peers=${1:?usage: guest-vms.sh up PEERS [DIR]} dir
  dir=$(realpath -m "${2:-.cache/guest-vms}")
  [[ $peers =~ ^[1-9][0-9]?$ ]] || fail "PEERS must be 1-99, not '$peers'"
  local hosts=(monitor) index
  for index in $(seq 1 "$peers"); do hosts+=("$(printf 'peer-%02d' "$index")"); done
  check_fits "${#hosts[@]}" "$dir"
  local image_dir
  image_dir=$(images/cloud-image.sh --print-dir)
  images/cloud-image.sh
  down "$dir"
  [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C testbed-guest -f "$dir/id_ed25519"
  write_tfvars "$dir/hosts.tfvars.json" "$peers" "$(cat "$dir/id_ed25519.pub")"
  terraform -chdir="$env_dir" init -input=false -no-color >/dev/null
  terraform -chdir="$env_dir" apply -input=false -auto-approve -no-color -var-file="$dir/hosts.tfvars.json" >/dev/null \
    || fail "terraform apply in $env_dir failed (run it there to see why)"
  terraform -chdir="$env_dir" output -json context >"$dir/context.json"
  ip link add "$bridge" type bridge
  ip addr add "$subnet_prefix.1/24" dev "$bridge"
  ip link set "$bridge" up
  iptables -I "${closed_rule[@]}"
  local host started=$SECONDS
  for host in "${hosts[@]}"; do
    mkdir -p "$dir/$host/context"
    write_context "$host" "$dir/context.json" "$dir/$host/context/context.sh"
    boot "$host" "$dir" "$image_dir"
  done
  local pids=()
  for host in "${hosts[@]}"; do wait_ready "$host" "$dir" "$started" & pids+=($!); done
  local failed=()
  for index in "${!pids[@]}"; do wait "${pids[$index]}" || failed+=("${hosts[$index]}"); done
  [ "${#failed[@]}" = 0 ] || { down "$dir"; fail "not up: ${failed[*]} (all guests stopped)"; }
  log "up: ${hosts[*]} on $bridge ($subnet_prefix.0/24, closed), user $user, key $dir/id_ed25519, accel $accel, $((SECONDS - started)) s"
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) shift; down "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
