# The cluster network: created (bridged, one IPv4 address range) or an existing one (network_id).

resource "opennebula_virtual_network" "cluster" {
  count = var.create_network ? 1 : 0

  name            = "${var.name}-net"
  description     = "Cluster network of the Hivemind testbed ${var.name}"
  type            = var.network.type
  bridge          = var.network.bridge
  physical_device = var.network.physical_device
  network_address = cidrhost(var.cluster_cidr, 0)
  network_mask    = cidrnetmask(var.cluster_cidr)
  gateway         = coalesce(var.network.gateway, cidrhost(var.cluster_cidr, 1))
  dns             = coalesce(var.network.dns, var.network.gateway, cidrhost(var.cluster_cidr, 1))
  cluster_ids     = length(var.network.cluster_ids) > 0 ? var.network.cluster_ids : null
  # 802.1Q and vxlan networks: the given VLAN, else one OpenNebula picks (the provider refuses neither set)
  vlan_id           = var.network.vlan_id == null ? null : tostring(var.network.vlan_id)
  automatic_vlan_id = contains(["802.1Q", "vxlan"], var.network.type) && var.network.vlan_id == null ? true : null
  mtu               = var.network.mtu
  # Only this module's group: without it OpenNebula adds the default group 0, which allows all traffic.
  security_groups = [tonumber(opennebula_security_group.cluster.id)]
  tags            = local.common_tags
}

resource "opennebula_virtual_network_address_range" "cluster" {
  count = var.create_network ? 1 : 0

  virtual_network_id = tonumber(opennebula_virtual_network.cluster[0].id)
  ar_type            = "IP4"
  # Hosts 10 ... 199: the monitor (10), peer-01 ... peer-99 (101 ... 199), and leases in between.
  ip4  = cidrhost(var.cluster_cidr, 10)
  size = 190
}

locals {
  network_id = var.create_network ? tonumber(opennebula_virtual_network.cluster[0].id) : var.network_id
}
