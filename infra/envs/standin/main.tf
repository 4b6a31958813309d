# The stand-in for fresh VMs (scripts/standin-vms.sh, docs/real-vms.md): the same inventory module that
# infra/modules/cluster calls on OpenNebula, fed with the stand-in hosts' addresses instead of the VMs'. Built-in
# functions only, so it applies offline:
#   terraform -chdir=infra/envs/standin init
#   terraform -chdir=infra/envs/standin apply -auto-approve -var-file=$PWD/.cache/standin-vms/hosts.tfvars.json
#   infra/write-inventory.sh infra/envs/standin DIR/hosts.yml     (DIR holding inventories/opennebula/group_vars)
terraform {
  required_version = ">= 1.9"
}

module "inventory" {
  source = "../../modules/ansible_inventory"

  peers        = var.peers
  monitor      = var.monitor
  cluster_cidr = var.cluster_cidr
  ssh_user     = var.ssh_user
  ssh_bastion  = var.ssh_bastion
  admin_cidrs  = var.admin_cidrs
  ports        = var.ports
}

output "ansible_inventory" {
  description = "The Ansible inventory of the stand-in hosts (what `make inventory` writes for OpenNebula's VMs)."
  value       = module.inventory.yaml
}
