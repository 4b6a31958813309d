# Credentials come only from the environment: OPENNEBULA_ENDPOINT, OPENNEBULA_USERNAME, OPENNEBULA_PASSWORD
# (and optionally OPENNEBULA_FLOW_ENDPOINT, OPENNEBULA_INSECURE). Nothing secret goes into *.tf or *.tfvars.
provider "opennebula" {}

module "cluster" {
  source = "../../modules/cluster"

  name           = var.name
  peers          = var.peers
  peer_vcpus     = var.peer_vcpus
  peer_cpu_share = var.peer_cpu_share
  peer_memory_mb = var.peer_memory_mb
  monitor        = var.monitor

  image_datastore_id  = var.image_datastore_id
  os_image_id         = var.os_image_id
  os_image_path       = var.os_image_path
  os_disk_size_mb     = var.os_disk_size_mb
  system_datastore_id = var.system_datastore_id

  cluster_cidr     = var.cluster_cidr
  create_network   = var.create_network
  network_id       = var.network_id
  network          = var.network
  static_addresses = var.static_addresses
  admin_cidrs      = var.admin_cidrs
  ports            = var.ports

  ssh_public_keys = var.ssh_public_keys
  ssh_user        = var.ssh_user
  ssh_bastion     = var.ssh_bastion
  tags            = var.tags

  sched_requirements = var.sched_requirements
}
