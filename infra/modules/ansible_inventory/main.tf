locals {
  monitor_host = merge(var.monitor, { name = "monitor" })

  inventory_yaml = templatefile("${path.module}/templates/inventory.yml.tftpl", {
    ssh_user     = var.ssh_user
    ssh_bastion  = var.ssh_bastion
    cluster_cidr = var.cluster_cidr
    ports        = var.ports
    admin_cidrs  = var.admin_cidrs
    peers        = var.peers
    monitor      = local.monitor_host
  })
}
