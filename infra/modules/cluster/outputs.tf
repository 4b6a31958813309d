output "hosts" {
  description = "Every VM by inventory name: OpenNebula id and name, address, role, vCPUs, CPU share and memory."
  value = {
    for name, host in local.hosts : name => {
      vm_id     = opennebula_virtual_machine.node[name].id
      vm_name   = opennebula_virtual_machine.node[name].name
      ip        = local.address[name]
      role      = host.role
      vcpus     = host.vcpus
      cpu_share = host.cpu_share
      memory_mb = host.memory_mb
    }
  }
}

output "peer_names" {
  description = "Inventory names of the peers in order (the first is the Hivemind bootstrap peer)."
  value       = local.peer_names
}

output "ansible_inventory" {
  description = "Ansible inventory (YAML): groups peers and monitor, per-host ansible_host, cluster_address, vcpus, memory_mb, ports as group vars."
  value       = module.inventory.yaml
}

output "security_group_id" {
  description = "ID of the cluster security group."
  value       = opennebula_security_group.cluster.id
}

output "network_id" {
  description = "ID of the virtual network the VMs are attached to (created or given)."
  value       = local.network_id
}

output "os_image_id" {
  description = "ID of the OS image the VMs boot from (created or given)."
  value       = local.os_image_id
}
