#!/usr/bin/env bash
# Build the guests' cloud image (docs/real-vms.md, "Guests on this machine"): Debian 12 from Debian's packages only,
# as Debian's genericcloud image is made: its kernel, systemd as PID 1 on the unified cgroup v2 hierarchy (systemd
# 252's default), cloud-init reading OpenNebula's CONTEXT CD-ROM (its datasource list is OpenNebula only),
# openssh-server with no password logins and root's refused (cloud-init's disable_root), no user: the CONTEXT's
# USER_DATA makes it (infra/modules/vm_context). No host keys and no machine-id: each guest makes its own at its
# first boot. One ext4 filesystem on the whole disk (cloud-init grows it to the guest's disk); the guest boots its
# own kernel and initrd, taken from the image's /boot (OpenNebula's OS KERNEL and INITRD).
#
# Output in TESTBED_CLOUD_IMAGE_DIR (default .cache/cloud-image): debian-12-testbed.qcow2, vmlinuz, initrd.img and
# recipe (the hash of this script), rebuilt only when the recipe changed.
# Usage: images/cloud-image.sh [--print-dir]
# Needs root, mmdebstrap, e2fsprogs and qemu-utils (make guest-tools installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TESTBED_CLOUD_IMAGE_DIR:-$PWD/.cache/cloud-image}
if [ "${1:-}" = --print-dir ]; then echo "$out"; exit 0; fi
image=$out/debian-12-testbed.qcow2
# what Debian's genericcloud image has that cloud-init and the testbed's roles use (e2fsprogs: cloud-init's
# resizefs; locales: its locale module; python3-apt: Ansible's apt module)
packages=(linux-image-amd64 systemd-sysv dbus cloud-init openssh-server sudo python3 python3-apt ifupdown
  iproute2 netbase ca-certificates procps less e2fsprogs locales)
filesystem_size=2G

log() { echo "[cloud-image] $*" >&2; }

host_mirror() {
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    awk '$1 == "deb" {print $2}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
  } | grep -v -- '-security' | head -n 1 || true
}

recipe=$(sha256sum "$0" | cut -c1-16)
if [ -f "$image" ] && [ "$(cat "$out/recipe" 2>/dev/null)" = "$recipe" ]; then
  log "$image up to date ($recipe)"
  exit 0
fi
for tool in mmdebstrap mke2fs qemu-img; do
  command -v "$tool" >/dev/null || { log "$tool is missing: run make guest-tools (Debian: mmdebstrap e2fsprogs qemu-utils)"; exit 2; }
done
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
[ -n "$mirror" ] || { log "no Debian mirror in the host's apt sources: set DEBIAN_MIRROR"; exit 2; }

started=$SECONDS
work=$(mktemp -d /var/tmp/cloud-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$out"
log "building $image (recipe $recipe) from $mirror"
# the customize hooks make it a cloud image: first-boot state removed, cloud-init pointed at OpenNebula's CONTEXT
mmdebstrap --variant=apt --include="$(IFS=,; echo "${packages[*]}")" \
  --customize-hook='echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$1/etc/fstab"' \
  --customize-hook='printf "%s\n" "datasource_list: [ OpenNebula ]" "ssh_pwauth: false" "locale: C.UTF-8" > "$1/etc/cloud/cloud.cfg.d/90-testbed.cfg"' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_* "$1/etc/hostname"; : > "$1/etc/machine-id"; rm -f "$1/var/lib/dbus/machine-id"' \
  --customize-hook='passwd --root "$1" --lock root >/dev/null' \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  bookworm "$rootfs" "$mirror" >"$work/mmdebstrap.log" 2>&1 \
  || { tail -n 30 "$work/mmdebstrap.log" >&2; log "mmdebstrap failed"; exit 1; }
cp "$(readlink -f "$rootfs/vmlinuz")" "$work/vmlinuz"
cp "$(readlink -f "$rootfs/initrd.img")" "$work/initrd.img"
mke2fs -q -t ext4 -L root -d "$rootfs" "$work/root.raw" "$filesystem_size"
qemu-img convert -O qcow2 "$work/root.raw" "$work/image.qcow2"
mv "$work/vmlinuz" "$work/initrd.img" "$out/"
mv "$work/image.qcow2" "$image"
echo "$recipe" >"$out/recipe"
log "built $image: $(du -m "$image" | cut -f1) MB on disk, kernel $(basename "$(readlink -f "$rootfs/vmlinuz")"), $((SECONDS - started)) s"
