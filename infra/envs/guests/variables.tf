# The types and checks are infra/modules/ansible_inventory's and infra/modules/vm_context's: not restated here.
variable "peers" {
  description = "The guest peers in order (scripts/guest-vms.sh writes them to hosts.tfvars.json)."
  type        = any
}

variable "monitor" {
  description = "The guest monitor."
  type        = any
}

variable "cluster_cidr" {
  description = "The guests' bridge network."
  type        = string
}

variable "ssh_user" {
  description = "The login user the CONTEXT makes (USERNAME, and USER_DATA for cloud-init)."
  type        = string
}

variable "ssh_public_keys" {
  description = "The keys the CONTEXT authorizes (SSH_PUBLIC_KEY)."
  type        = list(string)
}

variable "admin_cidrs" {
  description = "Networks allowed to SSH; the guests' do not hold the controller (the firewall's safety net must keep it in)."
  type        = list(string)
}

variable "ports" {
  description = "The testbed's ports: the local inventory's testbed_ports (scripts/guest-vms.sh reads them)."
  type        = any
}
