# The VMs: peer-01 ... peer-NN and monitor, one resource instance each (keyed by inventory name, so
# changing peers adds or removes only the peers at the end).

resource "opennebula_virtual_machine" "node" {
  for_each = local.hosts

  name        = "${var.name}-${each.key}"
  description = "Hivemind testbed ${var.name}: ${each.value.role} ${each.key}"
  cpu         = each.value.cpu_share
  vcpu        = each.value.vcpus
  memory      = each.value.memory_mb

  # the CONTEXT section (infra/modules/vm_context says which reader uses which key)
  context = module.context.values[each.key]

  os {
    arch = "x86_64"
    boot = "disk0"
  }

  disk {
    image_id = local.os_image_id
    size     = var.os_disk_size_mb
    target   = "vda"
    driver   = "raw"
  }

  nic {
    network_id      = local.network_id
    ip              = local.static_address[each.key]
    model           = "virtio"
    security_groups = [tonumber(opennebula_security_group.cluster.id)]
  }

  sched_requirements    = var.sched_requirements
  sched_ds_requirements = var.system_datastore_id != null ? "ID = ${var.system_datastore_id}" : null

  tags = merge(local.common_tags, {
    role = each.value.role
    host = each.key
  })

  # The NIC takes its address from the range, which must exist first.
  depends_on = [opennebula_virtual_network_address_range.cluster]
}

module "context" {
  source = "../vm_context"

  hosts           = { for name, host in local.hosts : name => host.role }
  ssh_user        = var.ssh_user
  ssh_public_keys = var.ssh_public_keys
}
