# Inputs of the example root configuration: every variable of modules/cluster, each passed to it, which validates
# it. The object-valued ones (monitor, network, ports) are `any` here and refuse a key the module does not take:
# Terraform would drop it without a word when converting to the module's object type.
# Copy terraform.tfvars.example to terraform.tfvars (git-ignored) and edit it.

variable "name" {
  description = "Name of the experiment cluster (prefix of the OpenNebula objects)."
  type        = string
  default     = "testbed"
}

variable "peers" {
  description = "Number of peer VMs; with peer_vcpus the study's split of 16 vCPUs (2x8, 4x4, 8x2, 16x1; baseline 1x16)."
  type        = number
  default     = 8
}

variable "peer_vcpus" {
  description = "vCPUs per peer VM."
  type        = number
  default     = 2
}

variable "peer_cpu_share" {
  description = "Physical CPU share per peer VM; null reserves one core per vCPU."
  type        = number
  default     = null
}

variable "peer_memory_mb" {
  description = "Memory per peer VM in MiB."
  type        = number
  default     = 4096
}

variable "monitor" {
  description = "Size of the monitor VM (modules/cluster's monitor): vcpus, cpu_share, memory_mb. Another key is an error."
  type        = any
  default     = {}

  validation {
    condition     = try(length(setsubtract(keys(var.monitor), ["vcpus", "cpu_share", "memory_mb"])) == 0, false)
    error_message = "monitor takes only vcpus, cpu_share and memory_mb (got ${try(join(", ", keys(var.monitor)), "no map")})."
  }
}

variable "image_datastore_id" {
  description = "ID of the Ceph-backed image datastore."
  type        = number
}

variable "os_image_id" {
  description = "ID of an existing OS image on that datastore (or set os_image_path)."
  type        = number
  default     = null
}

variable "os_image_path" {
  description = "Path or URL to import the OS image from (or set os_image_id)."
  type        = string
  default     = null
}

variable "os_disk_size_mb" {
  description = "OS disk size per VM in MiB; null keeps the image's size."
  type        = number
  default     = null
}

variable "system_datastore_id" {
  description = "ID of the Ceph system datastore to deploy to; null lets the scheduler choose."
  type        = number
  default     = null
}

variable "cluster_cidr" {
  description = "IPv4 CIDR of the cluster network."
  type        = string
}

variable "create_network" {
  description = "Create the cluster network (true) or use network_id (false)."
  type        = bool
  default     = true
}

variable "network_id" {
  description = "ID of an existing virtual network on cluster_cidr (when create_network is false)."
  type        = number
  default     = null
}

variable "network" {
  description = "Settings of the created network (modules/cluster's network): bridge, physical_device, type, gateway, dns, cluster_ids, vlan_id, mtu. Another key is an error."
  type        = any
  default     = {}

  validation {
    condition     = try(length(setsubtract(keys(var.network), ["bridge", "physical_device", "type", "gateway", "dns", "cluster_ids", "vlan_id", "mtu"])) == 0, false)
    error_message = "network takes only bridge, physical_device, type, gateway, dns, cluster_ids, vlan_id and mtu (got ${try(join(", ", keys(var.network)), "no map")})."
  }
}

variable "static_addresses" {
  description = "Fixed addresses in cluster_cidr (monitor .10, peer-NN .(100+NN))."
  type        = bool
  default     = true
}

variable "admin_cidrs" {
  description = "CIDRs allowed to SSH into the VMs (where Ansible runs)."
  type        = list(string)
}

variable "ssh_public_keys" {
  description = "SSH public keys installed into the VMs through contextualization."
  type        = list(string)
}

variable "ssh_user" {
  description = "User Ansible logs in as (sudo; made by contextualization). Debian's cloud images refuse root's login."
  type        = string
  default     = "debian"
}

variable "tags" {
  description = "Extra tags on every OpenNebula object."
  type        = map(string)
  default     = {}
}

variable "ssh_bastion" {
  description = "user@host[:port] to jump through when this machine cannot route to the cluster network (null: direct)."
  type        = string
  default     = null
}

variable "ports" {
  description = "The testbed's ports (modules/cluster's ports): trainer_metrics, hivemind, node_exporter, prometheus, grafana, data_parallel, netprobe, cross_traffic, wheelhouse, lighthouse, gloo (FIRST:LAST). Another key is an error."
  type        = any
  default     = {}

  validation {
    condition     = try(length(setsubtract(keys(var.ports), ["trainer_metrics", "hivemind", "node_exporter", "prometheus", "grafana", "data_parallel", "netprobe", "cross_traffic", "wheelhouse", "lighthouse", "gloo"])) == 0, false)
    error_message = "ports takes only trainer_metrics, hivemind, node_exporter, prometheus, grafana, data_parallel, netprobe, cross_traffic, wheelhouse, lighthouse and gloo (got ${try(join(", ", keys(var.ports)), "no map")})."
  }
}

variable "sched_requirements" {
  description = "OpenNebula scheduling requirement for the VMs' hosts (e.g. 'CLUSTER_ID = 100'); null lets the scheduler choose."
  type        = string
  default     = null
}
