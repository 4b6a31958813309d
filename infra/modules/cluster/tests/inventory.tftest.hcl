# The rendered Ansible inventory (docs/architecture.md, "Inventory"): groups peers and monitor, per-host
# ansible_host, cluster_address, vcpus, memory_mb, and the ports as group vars.

mock_provider "opennebula" {
  mock_resource "opennebula_security_group" {
    defaults = { id = "101" }
  }
  mock_resource "opennebula_virtual_network" {
    defaults = { id = "7" }
  }
  mock_resource "opennebula_virtual_machine" {
    defaults = { ip = "10.42.0.77" }
  }
}

variables {
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey test@example"]
  peers              = 8
  peer_vcpus         = 2
  peer_memory_mb     = 3072
}

run "eight_peers" {
  command = apply

  assert {
    condition     = keys(yamldecode(output.ansible_inventory).all.children) == ["monitor", "peers"]
    error_message = "The inventory must have exactly the groups peers and monitor."
  }
  assert {
    condition     = keys(yamldecode(output.ansible_inventory).all.children.peers.hosts) == [for n in range(1, 9) : format("peer-%02d", n)]
    error_message = "peers must hold peer-01 ... peer-08."
  }
  assert {
    condition = yamldecode(output.ansible_inventory).all.children.peers.hosts["peer-03"] == {
      ansible_host    = "10.42.0.103"
      cluster_address = "10.42.0.103"
      vcpus           = 2
      memory_mb       = 3072
    }
    error_message = "peer-03 must carry its static address, 2 vcpus and 3072 MiB."
  }
  assert {
    condition = yamldecode(output.ansible_inventory).all.children.monitor.hosts == {
      monitor = { ansible_host = "10.42.0.10", cluster_address = "10.42.0.10", vcpus = 2, memory_mb = 4096 }
    }
    error_message = "monitor must be the only host in group monitor, at .10."
  }
  assert {
    condition = yamldecode(output.ansible_inventory).all.vars == {
      ansible_user         = "debian"
      testbed_ssh_bastion  = null
      testbed_cluster_cidr = "10.42.0.0/24"
      testbed_ports = {
        trainer_metrics = 9410
        hivemind        = 31337
        node_exporter   = 9100
        prometheus      = 9090
        grafana         = 3000
        data_parallel   = 29500
        netprobe        = 5201
        cross_traffic   = 5202
        wheelhouse      = 5203
        lighthouse      = 29510
        gloo            = "32768:60999"
      }
      testbed_admin_cidrs = ["192.0.2.0/28"]
    }
    error_message = "The ports (contract defaults), gloo's range, the admin networks, ansible_user and the cluster network must be group vars of all."
  }
  assert {
    condition     = output.hosts["peer-08"] == { vm_id = output.hosts["peer-08"].vm_id, vm_name = "testbed-peer-08", ip = "10.42.0.108", role = "peer", vcpus = 2, cpu_share = 2, memory_mb = 3072 }
    error_message = "The hosts output must give each VM's name, IP, role and vCPUs."
  }
}

run "leased_addresses" {
  command = apply

  variables {
    static_addresses = false
    peers            = 2
    ssh_user         = "ubuntu"
    ssh_bastion      = "debian@gateway.example.org:2222"
  }

  assert {
    condition     = alltrue([for host in values(yamldecode(output.ansible_inventory).all.children.peers.hosts) : host.ansible_host == "10.42.0.77" && host.cluster_address == "10.42.0.77"])
    error_message = "Without static addresses the inventory must use the address OpenNebula reports for each VM."
  }
  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.nic[0].ip == null])
    error_message = "Without static addresses no NIC may request a fixed IP."
  }
  assert {
    condition     = yamldecode(output.ansible_inventory).all.vars.ansible_user == "ubuntu" && alltrue([for vm in opennebula_virtual_machine.node : vm.context.USERNAME == "ubuntu"])
    error_message = "ssh_user must become ansible_user and the VMs' USERNAME."
  }
  assert {
    condition     = yamldecode(output.ansible_inventory).all.vars.testbed_ssh_bastion == "debian@gateway.example.org:2222"
    error_message = "ssh_bastion must reach the inventory (the connection's ProxyJump)."
  }
}
