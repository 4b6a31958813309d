# Created or existing network, existing or imported OS image, contextualization, placement and tags.

mock_provider "opennebula" {
  mock_resource "opennebula_security_group" {
    defaults = { id = "101" }
  }
  mock_resource "opennebula_virtual_network" {
    defaults = { id = "7" }
  }
  mock_resource "opennebula_image" {
    defaults = { id = "55" }
  }
}

variables {
  image_datastore_id = 101
  os_image_id        = 42
  cluster_cidr       = "10.42.0.0/24"
  admin_cidrs        = ["192.0.2.0/28"]
  ssh_public_keys = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQTestKey bob@example",
  ]
  peers = 2
}

run "created_network_and_existing_image" {
  command = apply

  assert {
    condition     = opennebula_virtual_network.cluster[0].bridge == "br0" && opennebula_virtual_network.cluster[0].type == "bridge"
    error_message = "The created network must be a bridge network on br0."
  }
  assert {
    condition     = opennebula_virtual_network.cluster[0].network_mask == "255.255.255.0" && opennebula_virtual_network.cluster[0].gateway == "10.42.0.1"
    error_message = "The network must carry the cluster CIDR's mask and default gateway .1."
  }
  assert {
    condition     = opennebula_virtual_network_address_range.cluster[0].virtual_network_id == 7 && opennebula_virtual_network_address_range.cluster[0].ip4 == "10.42.0.10" && opennebula_virtual_network_address_range.cluster[0].size == 190
    error_message = "The address range must start at .10 and hold 190 addresses on the created network."
  }
  assert {
    condition     = length(opennebula_image.os) == 0
    error_message = "With os_image_id no image may be created."
  }
  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.disk[0].image_id == 42 && vm.disk[0].driver == "raw" && vm.nic[0].network_id == 7])
    error_message = "Every VM must boot image 42 (raw, Ceph) and sit on network 7."
  }
  assert {
    condition     = opennebula_virtual_machine.node["monitor"].nic[0].ip == "10.42.0.10" && opennebula_virtual_machine.node["peer-02"].nic[0].ip == "10.42.0.102"
    error_message = "Static addresses: monitor .10, peer-NN .(100+NN)."
  }
  assert {
    condition     = opennebula_virtual_machine.node["peer-01"].context.SET_HOSTNAME == "peer-01" && opennebula_virtual_machine.node["peer-01"].context.NETWORK == "YES"
    error_message = "Contextualization must set the hostname and configure the network."
  }
  assert {
    condition     = opennebula_virtual_machine.node["monitor"].context.SSH_PUBLIC_KEY == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey alice@example\nssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQTestKey bob@example"
    error_message = "Contextualization must carry every SSH public key, one per line."
  }
  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.context.USERNAME == "debian"])
    error_message = "Contextualization must make the login user (USERNAME, default debian: Debian's cloud images refuse root)."
  }
  assert {
    condition     = opennebula_virtual_machine.node["peer-02"].tags == tomap({ testbed = "testbed", managed_by = "terraform", role = "peer", host = "peer-02" })
    error_message = "Peer VMs must be tagged with testbed, role and host."
  }
  assert {
    condition     = opennebula_virtual_machine.node["monitor"].tags.role == "monitor" && opennebula_virtual_machine.node["monitor"].context.TESTBED_ROLE == "monitor"
    error_message = "The monitor VM must be tagged and contextualized with role monitor."
  }
  assert {
    condition     = output.network_id == 7 && output.os_image_id == 42 && output.security_group_id == "101"
    error_message = "Outputs must report the network, image and security group in use."
  }
}

run "existing_network_and_imported_image" {
  command = apply

  variables {
    create_network      = false
    network_id          = 12
    os_image_id         = null
    os_image_path       = "https://images.example.org/debian-12-genericcloud-amd64.qcow2"
    os_disk_size_mb     = 20480
    system_datastore_id = 100
    tags                = { project = "hivemind-study" }
  }

  assert {
    condition     = length(opennebula_virtual_network.cluster) == 0 && length(opennebula_virtual_network_address_range.cluster) == 0
    error_message = "With create_network = false no network may be created."
  }
  assert {
    condition     = opennebula_image.os[0].datastore_id == 101 && opennebula_image.os[0].path == "https://images.example.org/debian-12-genericcloud-amd64.qcow2" && opennebula_image.os[0].persistent == false
    error_message = "The image must be imported, non-persistent, into the Ceph image datastore 101."
  }
  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.disk[0].image_id == 55 && vm.disk[0].size == 20480 && vm.nic[0].network_id == 12])
    error_message = "Every VM must boot the imported image (55) resized to 20480 MiB, on network 12."
  }
  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.sched_ds_requirements == "ID = 100"])
    error_message = "VMs must be placed on system datastore 100."
  }
  assert {
    condition     = opennebula_image.os[0].tags.project == "hivemind-study" && opennebula_virtual_machine.node["peer-01"].tags.project == "hivemind-study"
    error_message = "Extra tags must reach every object."
  }
}

run "vlan_networks_get_a_vlan" {
  command = plan

  variables {
    network = { type = "802.1Q", physical_device = "eth1", mtu = 9000 }
  }

  assert {
    condition     = opennebula_virtual_network.cluster[0].automatic_vlan_id == true && opennebula_virtual_network.cluster[0].mtu == 9000
    error_message = "An 802.1Q network without vlan_id must ask OpenNebula for a VLAN, and carry the MTU."
  }
}

run "a_given_vlan_id_is_used" {
  command = plan

  variables {
    network = { type = "vxlan", physical_device = "eth1", vlan_id = 4242 }
  }

  assert {
    condition     = opennebula_virtual_network.cluster[0].vlan_id == "4242"
    error_message = "A given vlan_id must be set as it is."
  }
}
