# Bad input fails in the variables' validation blocks, before anything is planned.

mock_provider "opennebula" {}

variables {
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey test@example"]
}

run "valid_input_plans" {
  command = plan

  assert {
    condition     = length(opennebula_virtual_machine.node) == 9
    error_message = "The defaults (8 peers + monitor) must plan."
  }
}

run "rejects_zero_peers" {
  command = plan

  variables {
    peers = 0
  }

  expect_failures = [var.peers]
}

run "rejects_fractional_peers" {
  command = plan

  variables {
    peers = 2.5
  }

  expect_failures = [var.peers]
}

run "rejects_too_many_peers" {
  command = plan

  variables {
    peers = 100
  }

  expect_failures = [var.peers]
}

run "rejects_zero_vcpus" {
  command = plan

  variables {
    peer_vcpus = 0
  }

  expect_failures = [var.peer_vcpus]
}

run "rejects_fractional_vcpus" {
  command = plan

  variables {
    peer_vcpus = 1.5
  }

  expect_failures = [var.peer_vcpus]
}

run "rejects_cpu_share_above_vcpus" {
  command = plan

  variables {
    peer_vcpus     = 2
    peer_cpu_share = 4
  }

  expect_failures = [var.peer_cpu_share]
}

run "rejects_cpu_share_zero" {
  command = plan

  variables {
    peer_cpu_share = 0
  }

  expect_failures = [var.peer_cpu_share]
}

run "rejects_memory_too_small" {
  command = plan

  variables {
    peer_memory_mb = 256
  }

  expect_failures = [var.peer_memory_mb]
}

run "rejects_memory_insane" {
  command = plan

  variables {
    peer_memory_mb = 4194304
  }

  expect_failures = [var.peer_memory_mb]
}

run "rejects_monitor_memory_too_small" {
  command = plan

  variables {
    monitor = { memory_mb = 100 }
  }

  expect_failures = [var.monitor]
}

run "rejects_monitor_zero_vcpus" {
  command = plan

  variables {
    monitor = { vcpus = 0 }
  }

  expect_failures = [var.monitor]
}

run "rejects_cluster_cidr_not_a_cidr" {
  command = plan

  variables {
    cluster_cidr = "10.42.0.0"
  }

  expect_failures = [var.cluster_cidr]
}

run "rejects_cluster_cidr_bad_prefix" {
  command = plan

  variables {
    cluster_cidr = "10.42.0.0/33"
  }

  expect_failures = [var.cluster_cidr]
}

run "rejects_cluster_cidr_bad_address" {
  command = plan

  variables {
    cluster_cidr = "10.420.0.0/24"
  }

  expect_failures = [var.cluster_cidr]
}

run "rejects_cluster_cidr_host_bits" {
  command = plan

  variables {
    cluster_cidr = "10.42.0.5/24"
  }

  expect_failures = [var.cluster_cidr]
}

run "rejects_cluster_cidr_too_small_for_static" {
  command = plan

  variables {
    cluster_cidr = "10.42.0.0/25"
  }

  expect_failures = [var.cluster_cidr]
}

run "rejects_admin_cidrs_empty" {
  command = plan

  variables {
    admin_cidrs = []
  }

  expect_failures = [var.admin_cidrs]
}

run "rejects_admin_cidr_invalid" {
  command = plan

  variables {
    admin_cidrs = ["192.0.2.300/32"]
  }

  expect_failures = [var.admin_cidrs]
}

run "rejects_admin_cidr_whole_internet" {
  command = plan

  variables {
    admin_cidrs = ["0.0.0.0/0"]
  }

  expect_failures = [var.admin_cidrs]
}

run "rejects_image_id_and_path" {
  command = plan

  variables {
    os_image_path = "https://example.org/debian.qcow2"
  }

  expect_failures = [var.os_image_id]
}

run "rejects_no_image" {
  command = plan

  variables {
    os_image_id = null
  }

  expect_failures = [var.os_image_id]
}

run "rejects_negative_datastore" {
  command = plan

  variables {
    image_datastore_id = -1
  }

  expect_failures = [var.image_datastore_id]
}

run "rejects_existing_network_without_id" {
  command = plan

  variables {
    create_network = false
  }

  expect_failures = [var.network_id]
}

run "rejects_unknown_network_type" {
  command = plan

  variables {
    network = { type = "wifi" }
  }

  expect_failures = [var.network]
}

run "rejects_no_ssh_keys" {
  command = plan

  variables {
    ssh_public_keys = []
  }

  expect_failures = [var.ssh_public_keys]
}

run "rejects_not_an_ssh_key" {
  command = plan

  variables {
    ssh_public_keys = ["hunter2"]
  }

  expect_failures = [var.ssh_public_keys]
}

run "rejects_duplicate_ports" {
  command = plan

  variables {
    ports = { grafana = 9090 }
  }

  expect_failures = [var.ports]
}

run "rejects_port_out_of_range" {
  command = plan

  variables {
    ports = { hivemind = 70000 }
  }

  expect_failures = [var.ports]
}

run "rejects_service_port_on_ssh" {
  command = plan

  variables {
    ports = { grafana = 22 }
  }

  expect_failures = [var.ports]
}

run "rejects_a_gloo_range_backwards" {
  command = plan

  variables {
    ports = { gloo = "60999:32768" }
  }

  expect_failures = [var.ports]
}

run "rejects_bad_name" {
  command = plan

  variables {
    name = "Test Bed"
  }

  expect_failures = [var.name]
}

run "rejects_small_os_disk" {
  command = plan

  variables {
    os_disk_size_mb = 100
  }

  expect_failures = [var.os_disk_size_mb]
}

run "rejects_a_vlan_on_a_bridge" {
  command = plan

  variables {
    network = { type = "bridge", vlan_id = 10 }
  }

  expect_failures = [var.network]
}

run "rejects_an_802_1q_vlan_above_4094" {
  command = plan

  variables {
    network = { type = "802.1Q", vlan_id = 5000 }
  }

  expect_failures = [var.network]
}

run "rejects_a_tiny_mtu" {
  command = plan

  variables {
    network = { mtu = 100 }
  }

  expect_failures = [var.network]
}

run "rejects_a_bastion_that_is_no_host" {
  command = plan

  variables {
    ssh_bastion = "ssh://gateway example"
  }

  expect_failures = [var.ssh_bastion]
}
