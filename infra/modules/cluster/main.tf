# The experiment cluster: N peer VMs and one monitor VM, each from the OS image on the Ceph image datastore,
# on the cluster network behind one security group. Split by concern: main.image.tf, main.network.tf,
# main.security_group.tf, main.vm.tf; the Ansible inventory comes from ../ansible_inventory.

locals {
  peer_names = [for index in range(var.peers) : format("peer-%02d", index + 1)]

  # Every VM by its inventory name. host_number places it in cluster_cidr when static_addresses is on
  # (the same layout as the local podman cluster: monitor .10, peer-NN .(100+NN)).
  hosts = merge(
    {
      for index, name in local.peer_names : name => {
        role        = "peer"
        vcpus       = var.peer_vcpus
        cpu_share   = coalesce(var.peer_cpu_share, var.peer_vcpus)
        memory_mb   = var.peer_memory_mb
        host_number = 101 + index
      }
    },
    {
      monitor = {
        role        = "monitor"
        vcpus       = var.monitor.vcpus
        cpu_share   = coalesce(var.monitor.cpu_share, var.monitor.vcpus)
        memory_mb   = var.monitor.memory_mb
        host_number = 10
      }
    },
  )

  static_address = {
    for name, host in local.hosts : name => var.static_addresses ? cidrhost(var.cluster_cidr, host.host_number) : null
  }

  # The address other hosts and the controller reach each VM at.
  address = {
    for name in keys(local.hosts) : name => var.static_addresses ? local.static_address[name] : opennebula_virtual_machine.node[name].ip
  }

  common_tags = merge(var.tags, {
    testbed    = var.name
    managed_by = "terraform"
  })
}

module "inventory" {
  source = "../ansible_inventory"

  peers = [
    for name in local.peer_names : {
      name            = name
      ansible_host    = local.address[name]
      cluster_address = local.address[name]
      vcpus           = local.hosts[name].vcpus
      memory_mb       = local.hosts[name].memory_mb
    }
  ]
  monitor = {
    ansible_host    = local.address["monitor"]
    cluster_address = local.address["monitor"]
    vcpus           = local.hosts["monitor"].vcpus
    memory_mb       = local.hosts["monitor"].memory_mb
  }
  ssh_user     = var.ssh_user
  ssh_bastion  = var.ssh_bastion
  cluster_cidr = var.cluster_cidr
  ports        = var.ports
  admin_cidrs  = var.admin_cidrs
}
