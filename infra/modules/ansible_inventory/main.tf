locals {
  monitor_host = merge(var.monitor, { name = "monitor" })

  inventory_yaml = templatefile("${path.module}/templates/inventory.yml.tftpl", {
    ssh_user = var.ssh_user
    ports    = var.ports
    peers    = var.peers
    monitor  = local.monitor_host
  })
}
