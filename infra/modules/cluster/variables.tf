# ---------------------------------------------------------------------------------------------------------
# Cluster shape
# ---------------------------------------------------------------------------------------------------------
variable "name" {
  description = "Name of this experiment cluster: prefix of every OpenNebula object it creates and the value of the testbed tag."
  type        = string
  default     = "testbed"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}[a-z0-9]$", var.name))
    error_message = "name must be 2-32 characters of lower-case letters, digits and '-', starting with a letter."
  }
}

variable "peers" {
  description = "Number of peer VMs (peer-01 ... peer-NN). The study splits 16 vCPUs as 2x8, 4x4, 8x2 and 16x1; the baseline runs on 1x16."
  type        = number
  default     = 8
  nullable    = false

  validation {
    condition     = var.peers >= 1 && var.peers <= 99 && floor(var.peers) == var.peers
    error_message = "peers must be a whole number from 1 to 99."
  }
}

variable "peer_vcpus" {
  description = "Virtual CPUs presented to each peer VM (OpenNebula VCPU)."
  type        = number
  default     = 2
  nullable    = false

  validation {
    condition     = var.peer_vcpus >= 1 && var.peer_vcpus <= 256 && floor(var.peer_vcpus) == var.peer_vcpus
    error_message = "peer_vcpus must be a whole number from 1 to 256."
  }
}

variable "peer_cpu_share" {
  description = "Physical CPU share reserved for each peer VM (OpenNebula CPU, e.g. 0.5 = half a core). null reserves one full core per vCPU, so the split under test is not overcommitted."
  type        = number
  default     = null

  validation {
    condition     = var.peer_cpu_share == null || try(var.peer_cpu_share > 0 && var.peer_cpu_share <= var.peer_vcpus, false)
    error_message = "peer_cpu_share must be greater than 0 and at most peer_vcpus."
  }
}

variable "peer_memory_mb" {
  description = "Memory of each peer VM in MiB (a Hivemind peer with smallcnn uses about 1.3 GiB)."
  type        = number
  default     = 4096
  nullable    = false

  validation {
    condition     = var.peer_memory_mb >= 1024 && var.peer_memory_mb <= 1048576 && floor(var.peer_memory_mb) == var.peer_memory_mb
    error_message = "peer_memory_mb must be a whole number of MiB from 1024 (1 GiB) to 1048576 (1 TiB)."
  }
}

variable "monitor" {
  description = "Size of the monitor VM (Prometheus, Grafana). cpu_share null reserves one core per vCPU."
  type = object({
    vcpus     = optional(number, 2)
    cpu_share = optional(number)
    memory_mb = optional(number, 4096)
  })
  default  = {}
  nullable = false

  validation {
    condition     = var.monitor.vcpus >= 1 && var.monitor.vcpus <= 256 && floor(var.monitor.vcpus) == var.monitor.vcpus
    error_message = "monitor.vcpus must be a whole number from 1 to 256."
  }

  validation {
    condition     = var.monitor.cpu_share == null || try(var.monitor.cpu_share > 0 && var.monitor.cpu_share <= var.monitor.vcpus, false)
    error_message = "monitor.cpu_share must be greater than 0 and at most monitor.vcpus."
  }

  validation {
    condition     = var.monitor.memory_mb >= 1024 && var.monitor.memory_mb <= 1048576 && floor(var.monitor.memory_mb) == var.monitor.memory_mb
    error_message = "monitor.memory_mb must be a whole number of MiB from 1024 to 1048576."
  }
}

# ---------------------------------------------------------------------------------------------------------
# OS disk (Ceph-backed image datastore)
# ---------------------------------------------------------------------------------------------------------
variable "image_datastore_id" {
  description = "ID of the Ceph-backed image datastore (DS_MAD=ceph, TM_MAD=ceph) holding the OS image; a created image goes there."
  type        = number
  nullable    = false

  validation {
    condition     = var.image_datastore_id >= 0 && floor(var.image_datastore_id) == var.image_datastore_id
    error_message = "image_datastore_id must be a datastore ID (a whole number >= 0)."
  }
}

variable "os_image_id" {
  description = "ID of an existing OS image in image_datastore_id (Debian 12 with OpenNebula contextualization). Set this or os_image_path."
  type        = number
  default     = null

  validation {
    condition     = var.os_image_id == null || try(var.os_image_id >= 0 && floor(var.os_image_id) == var.os_image_id, false)
    error_message = "os_image_id must be an image ID (a whole number >= 0)."
  }

  validation {
    condition     = (var.os_image_id == null) != (var.os_image_path == null)
    error_message = "Set exactly one of os_image_id (use an existing image) and os_image_path (create an image from a path or URL)."
  }
}

variable "os_image_path" {
  description = "Path or URL OpenNebula imports the OS image from (e.g. a Debian 12 generic cloud qcow2); the module then creates the image in image_datastore_id. Set this or os_image_id."
  type        = string
  default     = null

  validation {
    condition     = var.os_image_path == null || try(length(trimspace(var.os_image_path)) > 0, false)
    error_message = "os_image_path must not be empty."
  }
}

variable "os_disk_size_mb" {
  description = "Size of each VM's OS disk in MiB (resizes the image's disk); null keeps the image's size."
  type        = number
  default     = null

  validation {
    condition     = var.os_disk_size_mb == null || try(var.os_disk_size_mb >= 2048 && floor(var.os_disk_size_mb) == var.os_disk_size_mb, false)
    error_message = "os_disk_size_mb must be a whole number of MiB, at least 2048."
  }
}

variable "system_datastore_id" {
  description = "ID of the (Ceph) system datastore the VMs must be deployed to; null lets the scheduler choose."
  type        = number
  default     = null

  validation {
    condition     = var.system_datastore_id == null || try(var.system_datastore_id >= 0 && floor(var.system_datastore_id) == var.system_datastore_id, false)
    error_message = "system_datastore_id must be a datastore ID (a whole number >= 0)."
  }
}

# ---------------------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------------------
variable "cluster_cidr" {
  description = "IPv4 CIDR of the cluster network. Hivemind, exporter, Prometheus and Grafana ports are opened only to it; with static_addresses the VMs get fixed addresses in it (monitor .10, peer-NN .(100+NN))."
  type        = string
  nullable    = false

  validation {
    condition     = can(cidrnetmask(var.cluster_cidr)) && try(cidrhost(var.cluster_cidr, 0) == split("/", var.cluster_cidr)[0], false)
    error_message = "cluster_cidr must be an IPv4 network in CIDR notation with no host bits set, e.g. 10.42.0.0/24."
  }

  validation {
    condition     = !var.static_addresses || try(tonumber(split("/", var.cluster_cidr)[1]) <= 24, false)
    error_message = "With static_addresses the cluster_cidr must be a /24 or larger (hosts .10 and .101-.199 are used)."
  }
}

variable "create_network" {
  description = "Create a bridged virtual network (with an address range) for the cluster; false attaches the VMs to network_id."
  type        = bool
  default     = true
  nullable    = false
}

variable "network_id" {
  description = "ID of an existing virtual network on cluster_cidr (used when create_network is false). Its own security groups also apply: remove the default group 0 from it, or it opens everything."
  type        = number
  default     = null

  validation {
    condition     = var.create_network || var.network_id != null
    error_message = "network_id is required when create_network is false."
  }

  validation {
    condition     = var.network_id == null || try(var.network_id >= 0 && floor(var.network_id) == var.network_id, false)
    error_message = "network_id must be a virtual network ID (a whole number >= 0)."
  }
}

variable "network" {
  description = "Settings of the created virtual network. gateway and dns default to the cluster_cidr's first host. 802.1Q and vxlan networks need a VLAN: vlan_id, or none for OpenNebula to pick one (automatic). mtu: the network's MTU (null: the driver's)."
  type = object({
    bridge          = optional(string, "br0")
    physical_device = optional(string)
    type            = optional(string, "bridge")
    gateway         = optional(string)
    dns             = optional(string)
    cluster_ids     = optional(list(number), [])
    vlan_id         = optional(number)
    mtu             = optional(number)
  })
  default  = {}
  nullable = false

  validation {
    condition     = contains(["dummy", "bridge", "fw", "ebtables", "802.1Q", "vxlan", "ovswitch"], var.network.type)
    error_message = "network.type must be one of dummy, bridge, fw, ebtables, 802.1Q, vxlan, ovswitch."
  }

  validation {
    condition     = var.network.gateway == null || can(cidrhost("${coalesce(var.network.gateway, "x")}/32", 0))
    error_message = "network.gateway must be an IPv4 address."
  }

  validation {
    condition     = var.network.vlan_id == null || (contains(["802.1Q", "vxlan", "ovswitch"], var.network.type) && try(var.network.vlan_id >= 1 && var.network.vlan_id <= 16777215 && floor(var.network.vlan_id) == var.network.vlan_id, false))
    error_message = "network.vlan_id is for 802.1Q, vxlan and ovswitch networks only, a whole number from 1 (802.1Q: to 4094; vxlan: to 16777215)."
  }

  validation {
    condition     = var.network.vlan_id == null || var.network.type != "802.1Q" || try(var.network.vlan_id <= 4094, false)
    error_message = "network.vlan_id of an 802.1Q network must be 1-4094."
  }

  validation {
    condition     = var.network.mtu == null || try(var.network.mtu >= 576 && var.network.mtu <= 9216, false)
    error_message = "network.mtu must be 576-9216 bytes."
  }
}

variable "static_addresses" {
  description = "Give the VMs fixed addresses in cluster_cidr (monitor host 10, peer-NN host 100+NN), known before apply and stable across resizes. false takes leases from the network."
  type        = bool
  default     = true
  nullable    = false
}

variable "admin_cidrs" {
  description = "IPv4 CIDRs allowed to reach the VMs over SSH (the Ansible controller's network). Nothing else is open to the outside."
  type        = list(string)
  nullable    = false

  validation {
    condition     = length(var.admin_cidrs) >= 1
    error_message = "admin_cidrs needs at least one CIDR (the Ansible controller must reach the VMs over SSH)."
  }

  validation {
    condition     = alltrue([for cidr in var.admin_cidrs : can(cidrnetmask(cidr)) && try(cidrhost(cidr, 0) == split("/", cidr)[0], false)])
    error_message = "Every admin_cidrs entry must be an IPv4 network in CIDR notation with no host bits set, e.g. 192.0.2.0/28."
  }

  validation {
    condition     = alltrue([for cidr in var.admin_cidrs : try(tonumber(split("/", cidr)[1]) >= 8, false)])
    error_message = "admin_cidrs entries must be /8 or narrower: SSH is not opened to the whole internet."
  }
}

variable "ports" {
  description = "The testbed's ports, their one list in Terraform (docs/architecture.md, Inventory): opened inside cluster_cidr and written to the inventory as the Ansible variable testbed_ports. gloo is a FIRST:LAST range: gloo's pair connections (DDP/ZeRO, DiLoCo) listen on the Linux ephemeral ports."
  type = object({
    trainer_metrics = optional(number, 9410)
    hivemind        = optional(number, 31337)
    node_exporter   = optional(number, 9100)
    prometheus      = optional(number, 9090)
    grafana         = optional(number, 3000)
    data_parallel   = optional(number, 29500)
    netprobe        = optional(number, 5201)
    cross_traffic   = optional(number, 5202)
    wheelhouse      = optional(number, 5203)
    lighthouse      = optional(number, 29510)
    gloo            = optional(string, "32768:60999")
  })
  default  = {}
  nullable = false

  validation {
    condition     = alltrue([for name, port in var.ports : port >= 1 && port <= 65535 && floor(port) == port if name != "gloo"])
    error_message = "Every port must be a whole number from 1 to 65535."
  }

  validation {
    condition     = length(distinct([for name, port in var.ports : port if name != "gloo"])) == length(var.ports) - 1 && !contains([for name, port in var.ports : port if name != "gloo"], 22)
    error_message = "The service ports must be distinct and must not be 22 (SSH)."
  }

  validation {
    condition     = can(regex("^[0-9]+:[0-9]+$", var.ports.gloo)) && try(tonumber(split(":", var.ports.gloo)[0]) < tonumber(split(":", var.ports.gloo)[1]) && tonumber(split(":", var.ports.gloo)[1]) <= 65535, false)
    error_message = "ports.gloo must be FIRST:LAST with FIRST < LAST <= 65535."
  }
}

# ---------------------------------------------------------------------------------------------------------
# Access and labels
# ---------------------------------------------------------------------------------------------------------
variable "ssh_public_keys" {
  description = "SSH public keys put into every VM through contextualization (SSH_PUBLIC_KEY)."
  type        = list(string)
  nullable    = false

  validation {
    condition     = length(var.ssh_public_keys) >= 1 && alltrue([for key in var.ssh_public_keys : can(regex("^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh.com) [A-Za-z0-9+/=]+( .*)?$", trimspace(key)))])
    error_message = "ssh_public_keys needs at least one OpenSSH public key line (ssh-ed25519 AAAA..., ssh-rsa AAAA..., ...)."
  }
}

variable "ssh_user" {
  description = "User Ansible logs in as, with sudo: contextualization (USERNAME) makes it on the VMs and installs the keys for it. Debian's cloud images refuse root's login; their user is debian."
  type        = string
  default     = "debian"
  nullable    = false
}

variable "tags" {
  description = "Extra tags (OpenNebula attributes) on every object; the module adds testbed = name and, on VMs, role and host."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "sched_requirements" {
  description = "OpenNebula scheduling requirement for the VMs' hosts (e.g. 'CLUSTER_ID = 100'); null lets the scheduler choose."
  type        = string
  default     = null
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
