variable "peers" {
  description = "Peer hosts in order; the first is the Hivemind bootstrap peer. Names must be peer-01, peer-02, ... (docs/architecture.md, Inventory)."
  type = list(object({
    name            = string
    ansible_host    = string
    cluster_address = string
    vcpus           = number
    memory_mb       = number
  }))
  nullable = false

  validation {
    condition     = length(var.peers) >= 1 && length(var.peers) <= 99
    error_message = "peers must hold between 1 and 99 hosts (names are peer-01 ... peer-99)."
  }

  validation {
    condition     = alltrue([for index, peer in var.peers : peer.name == format("peer-%02d", index + 1)])
    error_message = "peers must be named peer-01, peer-02, ... in order, with no gaps."
  }

  validation {
    condition = alltrue([
      for peer in var.peers : can(cidrhost("${peer.ansible_host}/32", 0)) && can(cidrhost("${peer.cluster_address}/32", 0))
    ])
    error_message = "Every peer's ansible_host and cluster_address must be an IPv4 address."
  }

  validation {
    condition = alltrue([
      for peer in var.peers : peer.vcpus >= 1 && floor(peer.vcpus) == peer.vcpus && peer.memory_mb >= 512 && floor(peer.memory_mb) == peer.memory_mb
    ])
    error_message = "Every peer needs a whole number of vcpus (>= 1) and memory_mb (>= 512)."
  }
}

variable "monitor" {
  description = "The monitoring host (Prometheus, Grafana); named monitor in the inventory."
  type = object({
    ansible_host    = string
    cluster_address = string
    vcpus           = number
    memory_mb       = number
  })
  nullable = false

  validation {
    condition     = can(cidrhost("${var.monitor.ansible_host}/32", 0)) && can(cidrhost("${var.monitor.cluster_address}/32", 0))
    error_message = "monitor.ansible_host and monitor.cluster_address must be IPv4 addresses."
  }

  validation {
    condition     = var.monitor.vcpus >= 1 && floor(var.monitor.vcpus) == var.monitor.vcpus && var.monitor.memory_mb >= 512
    error_message = "monitor needs a whole number of vcpus (>= 1) and memory_mb >= 512."
  }
}

variable "cluster_cidr" {
  description = "The cluster network (IPv4 CIDR): role cluster_firewall accepts the testbed's service ports only from it."
  type        = string
  nullable    = false

  validation {
    condition     = can(cidrhost(var.cluster_cidr, 0)) && length(split(".", split("/", var.cluster_cidr)[0])) == 4
    error_message = "cluster_cidr must be an IPv4 CIDR such as 10.42.0.0/24."
  }
}

variable "ssh_user" {
  description = "The user Ansible logs in as (ansible_user for all hosts)."
  type        = string
  default     = "debian"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]*$", var.ssh_user))
    error_message = "ssh_user must be a POSIX user name (lower case letters, digits, _ and -)."
  }
}

variable "ports" {
  description = "The testbed's ports (name => port, gloo a FIRST:LAST range), written as the Ansible variable testbed_ports: infra/modules/cluster's ports, where their defaults and checks are (the stand-in env passes the local inventory's)."
  type        = any
  nullable    = false
}

variable "admin_cidrs" {
  description = "IPv4 CIDRs allowed to SSH to the hosts, written as the group var testbed_admin_cidrs: role cluster_firewall accepts SSH from them."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for cidr in var.admin_cidrs : can(cidrnetmask(cidr))])
    error_message = "Every admin_cidrs entry must be an IPv4 network in CIDR notation."
  }
}

variable "ssh_bastion" {
  description = "user@host[:port] Ansible jumps through to reach the VMs' private addresses (SSH ProxyJump), where the controller is outside the cluster network; null: the controller routes to cluster_cidr itself."
  type        = string
  default     = null

  validation {
    condition     = var.ssh_bastion == null || can(regex("^([a-z_][a-z0-9_-]*@)?[A-Za-z0-9.-]+(:[0-9]{1,5})?$", coalesce(var.ssh_bastion, "x")))
    error_message = "ssh_bastion must be [user@]host[:port], e.g. debian@gateway.example.org."
  }
}
