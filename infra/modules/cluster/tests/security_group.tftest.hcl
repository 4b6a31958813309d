# The security group: SSH only from the admin CIDRs; Hivemind/p2p, trainer metrics, node_exporter,
# Prometheus, Grafana, the DDP rendezvous and gloo's ports only from inside the cluster network; nothing else
# inbound.

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
  admin_cidrs        = ["192.0.2.0/28", "198.51.100.7/32"]
  ssh_public_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyTestKeyTestKey test@example"]
  peers              = 4
  peer_vcpus         = 4
}

run "rules" {
  command = apply

  assert {
    condition = [
      for rule in opennebula_security_group.cluster.rule : { ip = rule.ip, size = rule.size }
      if rule.range == "22"
      ] == [
      { ip = "192.0.2.0", size = "16" },
      { ip = "198.51.100.7", size = "1" },
    ]
    error_message = "SSH (22) must be open exactly to the admin CIDRs 192.0.2.0/28 and 198.51.100.7/32."
  }

  assert {
    condition = alltrue([
      for port in ["31337", "9410", "9100", "9090", "3000", "29500", "5201", "5202", "5203", "29510", "32768:60999"] : [
        for rule in opennebula_security_group.cluster.rule : { ip = rule.ip, size = rule.size, protocol = rule.protocol, rule_type = rule.rule_type }
        if rule.range == port
      ] == [{ ip = "10.42.0.0", size = "256", protocol = "TCP", rule_type = "INBOUND" }]
    ])
    error_message = "Hivemind 31337, trainer metrics 9410, node_exporter 9100, Prometheus 9090, Grafana 3000, the DDP rendezvous 29500, the bandwidth probe 5201, cross traffic 5202, the wheelhouse 5203, the Lighthouse 29510 and gloo's 32768:60999 must each be open by one TCP rule, only to 10.42.0.0/24."
  }

  assert {
    condition = alltrue([
      for rule in opennebula_security_group.cluster.rule : rule.ip != null && rule.size != null
      if rule.rule_type == "INBOUND"
    ])
    error_message = "No inbound rule may be open to every address."
  }

  assert {
    condition = sort([
      for rule in opennebula_security_group.cluster.rule : rule.range if rule.rule_type == "INBOUND" && rule.protocol == "TCP"
    ]) == sort(["22", "22", "31337", "9410", "9100", "9090", "3000", "29500", "5201", "5202", "5203", "29510", "32768:60999"])
    error_message = "Inbound TCP must allow only SSH, the seven service ports and gloo's range."
  }

  assert {
    condition = [
      for rule in opennebula_security_group.cluster.rule : { protocol = rule.protocol, ip = rule.ip, size = rule.size }
      if rule.rule_type == "INBOUND" && rule.protocol != "TCP"
    ] == [{ protocol = "ICMP", ip = "10.42.0.0", size = "256" }]
    error_message = "Besides TCP, only ICMP from inside the cluster may come in."
  }

  assert {
    condition = [
      for rule in opennebula_security_group.cluster.rule : rule.protocol if rule.rule_type == "OUTBOUND"
    ] == ["ALL"]
    error_message = "All outbound traffic must be allowed (package installs)."
  }

  assert {
    condition     = alltrue([for vm in opennebula_virtual_machine.node : vm.nic[0].security_groups == tolist([101])])
    error_message = "Every VM's NIC must carry the cluster security group."
  }

  assert {
    condition     = opennebula_virtual_network.cluster[0].security_groups == toset([101])
    error_message = "The created network must carry only the cluster security group (not the allow-all default group 0)."
  }
}

run "custom_ports_follow_into_rules" {
  command = plan

  variables {
    ports = {
      hivemind = 40000
      grafana  = 3300
    }
  }

  assert {
    condition     = contains([for rule in opennebula_security_group.cluster.rule : rule.range], "40000") && contains([for rule in opennebula_security_group.cluster.rule : rule.range], "3300")
    error_message = "Overridden ports must be the ones opened."
  }

  assert {
    condition     = !contains([for rule in opennebula_security_group.cluster.rule : rule.range], "31337") && !contains([for rule in opennebula_security_group.cluster.rule : rule.range], "3000")
    error_message = "The default ports must not stay open once overridden."
  }
}

run "wider_cluster_network" {
  command = plan

  variables {
    cluster_cidr = "172.20.0.0/16"
  }

  assert {
    condition = alltrue([
      for rule in opennebula_security_group.cluster.rule : rule.ip == "172.20.0.0" && rule.size == "65536"
      if rule.rule_type == "INBOUND" && rule.range != "22"
    ])
    error_message = "Cluster rules must cover exactly 172.20.0.0/16 (65536 addresses)."
  }
}
