# The types and checks are infra/modules/ansible_inventory's (its variables.tf): not restated here.
variable "peers" {
  description = "The stand-in peers in order (scripts/standin-vms.sh writes them to hosts.tfvars.json)."
  type        = any
}

variable "monitor" {
  description = "The stand-in monitor host."
  type        = any
}

variable "cluster_cidr" {
  description = "The stand-in's podman network."
  type        = string
}

variable "ssh_user" {
  description = "The non-root user with sudo, as on a cloud image."
  type        = string
}

variable "ssh_bastion" {
  description = "The stand-ins' bastion (STANDIN_BASTION=1), or null: this machine reaches the hosts directly."
  type        = string
  default     = null
}

variable "admin_cidrs" {
  description = "Networks allowed to SSH; the stand-in's do not hold the controller (the firewall's safety net must keep it in)."
  type        = list(string)
}

variable "ports" {
  description = "The testbed's ports: the local inventory's testbed_ports (scripts/standin-vms.sh reads them), as the stand-in hosts stand in for this machine's cluster."
  type        = any
}
