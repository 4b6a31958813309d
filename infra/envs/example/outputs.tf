output "hosts" {
  description = "Every VM by inventory name: id, name, ip, role, vcpus, cpu_share, memory_mb."
  value       = module.cluster.hosts
}

output "ansible_inventory" {
  description = "The Ansible inventory; `make inventory` writes it to inventories/opennebula/hosts.yml."
  value       = module.cluster.ansible_inventory
}
