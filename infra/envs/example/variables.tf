# Inputs of the example root configuration; each is passed to modules/cluster, which validates it.
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
  description = "Size of the monitor VM: vcpus, cpu_share, memory_mb."
  type = object({
    vcpus     = optional(number, 2)
    cpu_share = optional(number)
    memory_mb = optional(number, 4096)
  })
  default = {}
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
  description = "Settings of the created network: bridge, physical_device, type, gateway, dns, cluster_ids."
  type = object({
    bridge          = optional(string, "br0")
    physical_device = optional(string)
    type            = optional(string, "bridge")
    gateway         = optional(string)
    dns             = optional(string)
    cluster_ids     = optional(list(number), [])
  })
  default = {}
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
