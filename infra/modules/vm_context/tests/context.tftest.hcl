# The CONTEXT section every VM gets (infra/modules/cluster on OpenNebula, infra/envs/guests on this machine's qemu
# guests): the keys OpenNebula's context packages read and the USER_DATA cloud-init's datasource reads instead of
# USERNAME.

variables {
  hosts           = { "peer-01" = "peer", monitor = "monitor" }
  ssh_user        = "debian"
  ssh_public_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example ", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQTestKey bob@example"]
}

run "a_user_with_sudo" {
  command = apply

  assert {
    condition     = output.values["peer-01"].SET_HOSTNAME == "peer-01" && output.values.monitor.TESTBED_ROLE == "monitor" && output.values["peer-01"].NETWORK == "YES"
    error_message = "Every VM is named after its inventory name and carries its role and NETWORK=YES."
  }
  assert {
    condition     = output.values.monitor.SSH_PUBLIC_KEY == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQTestKey bob@example"
    error_message = "SSH_PUBLIC_KEY holds every key, trimmed, one a line."
  }
  assert {
    condition     = output.values["peer-01"].USERNAME == "debian" && output.values["peer-01"].USERDATA_ENCODING == "base64"
    error_message = "USERNAME (OpenNebula's context packages) and base64 USER_DATA (cloud-init) are both set."
  }
  assert {
    condition = yamldecode(base64decode(output.values["peer-01"].USER_DATA)) == {
      disable_root = true
      users = [{
        name                = "debian"
        sudo                = "ALL=(ALL) NOPASSWD:ALL"
        shell               = "/bin/bash"
        lock_passwd         = true
        ssh_authorized_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQTestKey bob@example"]
      }]
    }
    error_message = "USER_DATA makes ssh_user with passwordless sudo and the keys, and refuses root."
  }
  assert {
    condition     = startswith(base64decode(output.values.monitor.USER_DATA), "#cloud-config\n")
    error_message = "USER_DATA is a cloud-config (its first line #cloud-config)."
  }
}

run "root" {
  command = apply

  variables {
    ssh_user = "root"
  }

  assert {
    condition     = !contains(keys(output.values.monitor), "USERNAME")
    error_message = "For root no user is made (no USERNAME)."
  }
  assert {
    condition     = yamldecode(base64decode(output.values.monitor.USER_DATA)) == { disable_root = false }
    error_message = "For root USER_DATA lets root's keys log in (cloud-init refuses root otherwise)."
  }
}
