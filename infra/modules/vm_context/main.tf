# What OpenNebula writes into each VM's CONTEXT CD-ROM (context.sh) beside the NICs' ETH<n>_* keys, as the
# template's CONTEXT section: infra/modules/cluster sets it on every VM, and scripts/guest-vms.sh renders it
# into the guests' CONTEXT ISOs, so that one definition serves both.
#
# Two readers act on it, and each key is there for one of them or both:
# - OpenNebula's context packages (one-context) read NETWORK, SET_HOSTNAME, SSH_PUBLIC_KEY and USERNAME (they make
#   the user, with sudo, and give it the keys);
# - cloud-init's OpenNebula datasource (the one Debian's cloud images run) reads SET_HOSTNAME, SSH_PUBLIC_KEY and
#   USER_DATA, but not USERNAME: it gives the keys to the image's default user. USER_DATA (base64 cloud-config)
#   therefore makes ssh_user itself, with the same sudo and keys; for root it lets root's keys log in (cloud-init
#   refuses root's login otherwise).
# TESTBED_ROLE is the testbed's own (peer or monitor), read by neither.

locals {
  keys = [for key in var.ssh_public_keys : trimspace(key)]

  user = {
    name                = var.ssh_user
    sudo                = "ALL=(ALL) NOPASSWD:ALL"
    shell               = "/bin/bash"
    lock_passwd         = true
    ssh_authorized_keys = local.keys
  }
  cloud_config = merge(
    { disable_root = var.ssh_user != "root" },
    var.ssh_user == "root" ? {} : { users = [local.user] },
  )

  user_data = "#cloud-config\n${yamlencode(local.cloud_config)}"

  values = {
    for name, role in var.hosts : name => merge(
      {
        NETWORK           = "YES"
        SET_HOSTNAME      = name
        SSH_PUBLIC_KEY    = join("\n", local.keys)
        TESTBED_ROLE      = role
        USER_DATA         = base64encode(local.user_data)
        USERDATA_ENCODING = "base64"
      },
      var.ssh_user == "root" ? {} : { USERNAME = var.ssh_user },
    )
  }
}
