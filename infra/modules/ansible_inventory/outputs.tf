output "yaml" {
  description = "The Ansible inventory (YAML) with groups peers and monitor; write it to inventories/opennebula/hosts.yml."
  value       = local.inventory_yaml
}

output "hosts" {
  description = "Every host by inventory name: the per-host vars written to the inventory."
  value = {
    for host in concat(var.peers, [local.monitor_host]) : host.name => {
      ansible_host    = host.ansible_host
      cluster_address = host.cluster_address
      vcpus           = host.vcpus
      memory_mb       = host.memory_mb
    }
  }
}
