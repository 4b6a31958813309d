# Guests on this machine (scripts/guest-vms.sh, docs/real-vms.md "Guests on this machine"): qemu VMs booted from
# the cloud image images/cloud-image.sh builds, contextualized as OpenNebula contextualizes its VMs. Their CONTEXT
# sections come from the same module infra/modules/cluster sets on OpenNebula's VMs, their inventory from the same
# inventory module. Built-in functions only, so it applies offline:
#   terraform -chdir=infra/envs/guests init
#   terraform -chdir=infra/envs/guests apply -auto-approve -var-file=$PWD/.cache/guest-vms/hosts.tfvars.json
#   infra/write-inventory.sh infra/envs/guests DIR/hosts.yml     (DIR holding inventories/opennebula/group_vars)
terraform {
  required_version = ">= 1.9"
}

module "context" {
  source = "../../modules/vm_context"

  hosts           = merge({ for peer in var.peers : peer.name => "peer" }, { monitor = "monitor" })
  ssh_user        = var.ssh_user
  ssh_public_keys = var.ssh_public_keys
}

module "inventory" {
  source = "../../modules/ansible_inventory"

  peers        = var.peers
  monitor      = var.monitor
  cluster_cidr = var.cluster_cidr
  ssh_user     = var.ssh_user
  admin_cidrs  = var.admin_cidrs
  ports        = var.ports
}

output "context" {
  description = "Each guest's CONTEXT section (scripts/guest-vms.sh writes it into the guest's context.sh with its NIC's keys)."
  value       = module.context.values
}

output "ansible_inventory" {
  description = "The Ansible inventory of the guests (what `make inventory` writes for OpenNebula's VMs)."
  value       = module.inventory.yaml
}
