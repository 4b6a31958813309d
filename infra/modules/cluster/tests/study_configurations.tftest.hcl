# The study's splits of 16 vCPUs (2x8, 4x4, 8x2, 16x1) and the 1x16 baseline: VM count, names, vCPUs.

mock_provider "opennebula" {
  mock_resource "opennebula_security_group" {
    defaults = { id = "101" }
  }
  mock_resource "opennebula_virtual_network" {
    defaults = { id = "7" }
  }
}

variables {
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey test@example"]
}

run "two_peers_of_eight_vcpus" {
  command = plan

  variables {
    peers      = 2
    peer_vcpus = 8
  }

  assert {
    condition     = length(opennebula_virtual_machine.node) == 3
    error_message = "2 peers + 1 monitor expected."
  }
  assert {
    condition     = keys(opennebula_virtual_machine.node) == ["monitor", "peer-01", "peer-02"]
    error_message = "VMs must be monitor, peer-01, peer-02."
  }
  assert {
    condition     = alltrue([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu == 8 && opennebula_virtual_machine.node[name].cpu == 8])
    error_message = "Every peer needs 8 vCPUs and a CPU share of 8."
  }
  assert {
    condition     = sum([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu]) == 16
    error_message = "The peers must add up to 16 vCPUs."
  }
}

run "four_peers_of_four_vcpus" {
  command = plan

  variables {
    peers      = 4
    peer_vcpus = 4
  }

  assert {
    condition     = length(opennebula_virtual_machine.node) == 5
    error_message = "4 peers + 1 monitor expected."
  }
  assert {
    condition     = output.peer_names == ["peer-01", "peer-02", "peer-03", "peer-04"]
    error_message = "Peers must be peer-01 ... peer-04 in order."
  }
  assert {
    condition     = alltrue([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu == 4])
    error_message = "Every peer needs 4 vCPUs."
  }
  assert {
    condition     = sum([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu]) == 16
    error_message = "The peers must add up to 16 vCPUs."
  }
}

run "eight_peers_of_two_vcpus" {
  command = plan

  variables {
    peers          = 8
    peer_vcpus     = 2
    peer_memory_mb = 3072
  }

  assert {
    condition     = length([for vm in opennebula_virtual_machine.node : vm if vm.tags.role == "peer"]) == 8
    error_message = "8 VMs tagged role=peer expected."
  }
  assert {
    condition     = length([for vm in opennebula_virtual_machine.node : vm if vm.tags.role == "monitor"]) == 1
    error_message = "Exactly one VM tagged role=monitor expected."
  }
  assert {
    condition     = alltrue([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu == 2 && opennebula_virtual_machine.node[name].memory == 3072])
    error_message = "Every peer needs 2 vCPUs and 3072 MiB."
  }
  assert {
    condition     = output.peer_names[7] == "peer-08" && opennebula_virtual_machine.node["peer-08"].name == "testbed-peer-08"
    error_message = "The eighth peer must be peer-08 (VM testbed-peer-08)."
  }
}

run "sixteen_peers_of_one_vcpu" {
  command = plan

  variables {
    peers      = 16
    peer_vcpus = 1
  }

  assert {
    condition     = length(opennebula_virtual_machine.node) == 17
    error_message = "16 peers + 1 monitor expected."
  }
  assert {
    condition     = output.peer_names[0] == "peer-01" && output.peer_names[15] == "peer-16"
    error_message = "Peers must run from peer-01 to peer-16 (zero-padded)."
  }
  assert {
    condition     = sum([for name in output.peer_names : opennebula_virtual_machine.node[name].vcpu]) == 16
    error_message = "The peers must add up to 16 vCPUs."
  }
}

run "baseline_one_peer_of_sixteen_vcpus" {
  command = plan

  variables {
    peers          = 1
    peer_vcpus     = 16
    peer_cpu_share = 8
  }

  assert {
    condition     = keys(opennebula_virtual_machine.node) == ["monitor", "peer-01"]
    error_message = "The baseline needs peer-01 and the monitor."
  }
  assert {
    condition     = opennebula_virtual_machine.node["peer-01"].vcpu == 16 && opennebula_virtual_machine.node["peer-01"].cpu == 8
    error_message = "peer-01 needs 16 vCPUs and the given CPU share of 8."
  }
  assert {
    condition     = opennebula_virtual_machine.node["monitor"].vcpu == 2 && opennebula_virtual_machine.node["monitor"].memory == 4096
    error_message = "The monitor keeps its own default size (2 vCPUs, 4096 MiB)."
  }
}
