#!/usr/bin/env bash
# Writes the Ansible inventory a Terraform root configuration rendered (its `ansible_inventory` output) to a
# file, after checking that Ansible can load it. Used by `make inventory`.
# Usage: infra/write-inventory.sh [ROOT_DIR] [OUTPUT]
#   ROOT_DIR  default infra/envs/example (where `terraform apply` ran)
#   OUTPUT    default inventories/opennebula/hosts.yml (git-ignored; group_vars/ next to it)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
root="${1:-$repo/infra/envs/example}"
output="${2:-$repo/inventories/opennebula/hosts.yml}"
ansible_inventory="${ANSIBLE_INVENTORY_BIN:-$(command -v ansible-inventory || echo "$repo/.venv/bin/ansible-inventory")}"

workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
rendered="$workdir/hosts.yml"
if ! terraform -chdir="$root" output -no-color -raw ansible_inventory >"$rendered"; then
  echo "write-inventory: no ansible_inventory output in $root; run terraform apply there first" >&2
  exit 1
fi
if ! grep -q '^    peers:' "$rendered"; then
  echo "write-inventory: the ansible_inventory output of $root holds no peers group" >&2
  exit 1
fi
ANSIBLE_INVENTORY_UNPARSED_FAILED=true "$ansible_inventory" -i "$rendered" --list >/dev/null
mkdir -p "$(dirname "$output")"
cp "$rendered" "$output"
echo "write-inventory: wrote $output"
