# The OS image lives on the Ceph-backed image datastore. Either an existing image (os_image_id) or one
# OpenNebula imports from os_image_path. Non-persistent: every VM boots from its own RBD clone of it.

resource "opennebula_image" "os" {
  count = var.os_image_path != null ? 1 : 0

  name         = "${var.name}-os"
  description  = "OS image of the Hivemind testbed ${var.name}"
  datastore_id = var.image_datastore_id
  path         = var.os_image_path
  type         = "OS"
  persistent   = false
  dev_prefix   = "vd"
  # Ceph image datastores store images as raw RBD volumes.
  driver      = "raw"
  permissions = "600"
  tags        = local.common_tags
}

locals {
  os_image_id = var.os_image_path != null ? tonumber(opennebula_image.os[0].id) : var.os_image_id
}
