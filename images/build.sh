#!/usr/bin/env bash
# Build the local images (docs/architecture.md, "Images"), each only when missing or out of date:
#   localhost/testbed-base:bookworm  debootstrap minbase + python3 + systemd, imported offline
#   localhost/testbed-node:latest    base + the trainer role's pinned Python dependencies + Debian packages the
#                                    other roles install (Ceph client and test cluster, Prometheus, node exporter)
#                                    + the system Python's cache of what it compiles from zip archives (Ansible's
#                                    modules: images/node/), labelled with the hash of requirements/node.txt, of
#                                    images/node/ and of this recipe.
# Usage: images/build.sh [base|node|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/images/containers.conf}
export ANSIBLE_CONFIG=$repo/ansible.cfg
what=${1:-all}
base_image=localhost/testbed-base:bookworm
node_image=localhost/testbed-node:latest
build_container=testbed-image-build
rootfs=${TESTBED_ROOTFS:-/var/tmp/testbed-rootfs}
# The Debian mirror the host's own apt uses (deb822 .sources or a classic sources.list), unless DEBIAN_MIRROR says.
host_mirror() {
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    awk '$1 == "deb" {print $2}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
  } | grep -v -- '-security' | head -n 1 || true   # missing files are fine: the first mirror found counts
}
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
[ -n "$mirror" ] || { echo "[build-image] no Debian mirror in the host's apt sources: set DEBIAN_MIRROR" >&2; exit 2; }
# Debian packages baked into the node image so that runs do not apt-install them in every container.
node_packages=(python3-venv python3-pip fuse3 ceph-fuse ceph-common ceph-mon ceph-mgr ceph-osd ceph-mds
  prometheus prometheus-node-exporter nfs-common iptables iperf3)
# The host's CA bundle, mounted beside (not over) the image's own so that pip trusts the same proxies as the host.
build_ca=/etc/testbed-build-ca.crt

log() { echo "[build-image] $*" >&2; }
timed() { local s=$SECONDS; "$@"; log "$1 ${2:-}: $((SECONDS - s)) s"; }

# One base build at a time: `make test` may ask for the base image from two places at once (the node image's build
# and the base image's Molecule scenarios); the second waits for the first, then finds the image present.
build_base() { { flock 9; build_base_now; } 9>"$rootfs.lock"; }

build_base_now() {
  if podman image exists "$base_image"; then log "$base_image present"; return; fi
  if [ ! -x "$rootfs/usr/bin/python3" ]; then
    rm -rf "$rootfs"
    timed debootstrap --variant=minbase \
      --include=python3,python3-apt,sudo,iproute2,procps,systemd,systemd-sysv,dbus \
      bookworm "$rootfs" "$mirror" >/var/tmp/testbed-debootstrap.log
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb
  fi
  tar -C "$rootfs" -c . | podman import --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'STOPSIGNAL=SIGRTMIN+3' - "$base_image" >/dev/null
  log "$base_image imported"
}

# Files copied into the system Python's site directory of the node image (images/node/testbed_zipimport_cache.py
# says why).
node_site_files=(images/node/testbed_zipimport_cache.py images/node/testbed_zipimport_cache.pth)

node_recipe_hash() {
  { cat requirements/node.txt; printf '%s\n' "${node_packages[@]}"; cat "${node_site_files[@]}"; } \
    | sha256sum | cut -c1-16
}

cleanup_build_container() { podman rm -f -t 0 "$build_container" >/dev/null 2>&1 || true; }

build_node() {
  local want have
  want=$(node_recipe_hash)
  have=$(podman image inspect --format '{{ index .Labels "testbed.recipe" }}' "$node_image" 2>/dev/null || true)
  if [ "$want" = "$have" ]; then log "$node_image up to date ($want)"; return; fi
  log "building $node_image (recipe $want, image has '${have:-none}')"
  cleanup_build_container
  trap cleanup_build_container EXIT
  # pip inside the container uses the host's pip configuration, local indexes and CA bundle (read-only).
  local mounts=(-v "$(scripts/cgroup-volume.sh)")
  for path in /etc/pip.conf /root/.config/pip/pip.conf /opt/wheels /opt/pypi /opt/pypi-more; do
    if [ -e "$path" ]; then mounts+=(-v "$path:$path:ro"); fi
  done
  if [ -e /etc/ssl/certs/ca-certificates.crt ]; then
    mounts+=(-v "/etc/ssl/certs/ca-certificates.crt:$build_ca:ro")
  fi
  # crun sometimes fails to create a container's cgroups while other containers start: retry.
  local attempt
  for attempt in 1 2 3; do
    # (and sometimes the container exits at once, "Failed to connect to bus": it must still run a second later)
    podman run -d --name "$build_container" --hostname "$build_container" "${mounts[@]}" \
      "$base_image" >/dev/null && sleep 1 \
      && [ "$(podman inspect -f '{{ .State.Running }}' "$build_container")" = true ] && break
    cleanup_build_container
    [ "$attempt" = 3 ] && { log "could not start $build_container"; exit 1; }
    sleep 2
  done
  podman exec "$build_container" systemctl is-system-running --wait >/dev/null || true
  timed podman exec "$build_container" bash -euc \
    "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq
     apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io ${node_packages[*]} >/dev/null
     systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
     apt-get clean"
  # the zipimport cache first: the playbook's own modules fill it, and the image keeps what they compiled
  local site file
  site=$(podman exec "$build_container" python3 -c 'import site; print(site.getsitepackages()[0])')
  podman exec "$build_container" mkdir -p "$site"
  for file in "${node_site_files[@]}"; do podman cp "$file" "$build_container:$site/"; done
  podman exec "$build_container" python3 -c 'import zipimport, testbed_zipimport_cache as c
assert zipimport._compile_source is c._compile_cached' \
    || { log "the zipimport cache does not load in $build_container"; exit 1; }
  # The pinned dependencies with uv first (scripts/uv_pip_install.py: under the pip configuration mounted above,
  # unpacked and compiled on every core, where the role's pip takes one), into the role's venv (trainer_venv); the
  # role then finds them installed and writes its installation record. uv, its cache and the script are removed
  # before the commit (the venv's files are hard links into the cache: the image holds them once).
  podman exec "$build_container" bash -euc "mkdir -p /tmp/uv-install /opt/testbed
    [ -x /opt/testbed/venv/bin/python ] || python3 -m venv /opt/testbed/venv"
  podman cp "$repo/.venv/bin/uv" "$build_container:/tmp/uv-install/uv"
  podman cp scripts/uv_pip_install.py "$build_container:/tmp/uv-install/"
  podman cp requirements/node.txt "$build_container:/tmp/uv-install/"
  timed podman exec -e PIP_CERT="$build_ca" -e PATH=/tmp/uv-install:/usr/sbin:/usr/bin:/sbin:/bin \
    -e UV_CACHE_DIR=/tmp/uv-install/cache -e UV_NO_CONFIG=1 "$build_container" \
    python3 /tmp/uv-install/uv_pip_install.py --python /opt/testbed/venv/bin/python --quiet \
    --link-mode hardlink -r /tmp/uv-install/node.txt
  timed "$repo/.venv/bin/ansible-playbook" -i "$build_container," -c containers.podman.podman \
    -e "{\"trainer_pip_environment\": {\"PIP_CERT\": \"$build_ca\", \"PIP_NO_CACHE_DIR\": \"1\"}}" \
    images/node-dependencies.yml
  podman exec "$build_container" bash -c 'rm -rf /root/.cache /tmp/*'
  podman stop -t 10 "$build_container" >/dev/null
  timed podman commit --change 'CMD ["/lib/systemd/systemd"]' --change 'STOPSIGNAL=SIGRTMIN+3' \
    --change "LABEL testbed.recipe=$want" --change "LABEL testbed.requirements-sha256=$(sha256sum requirements/node.txt | cut -d' ' -f1)" \
    "$build_container" "$node_image" >/dev/null
  cleanup_build_container
  trap - EXIT
  log "$node_image built"
}

case $what in
  base) build_base ;;
  node) build_base; build_node ;;
  all) build_base; build_node ;;
  *) echo "usage: $0 [base|node|all]" >&2; exit 2 ;;
esac
