# The inventory module uses built-in functions only: these runs apply for real, offline, no provider.

variables {
  peers = [
    for n in range(1, 5) : {
      name            = format("peer-%02d", n)
      ansible_host    = "192.0.2.${100 + n}"
      cluster_address = "10.42.0.${100 + n}"
      vcpus           = 4
      memory_mb       = 8192
    }
  ]
  monitor = {
    ansible_host    = "192.0.2.10"
    cluster_address = "10.42.0.10"
    vcpus           = 2
    memory_mb       = 4096
  }
  cluster_cidr = "10.42.0.0/24"
  # infra/modules/cluster hands its ports over (their defaults and checks are there); any values do here
  ports = { hivemind = 4001, grafana = 4002, gloo = "40000:40100" }
}

run "renders_groups_hosts_and_vars" {
  assert {
    condition     = keys(yamldecode(output.yaml).all.children.peers.hosts) == ["peer-01", "peer-02", "peer-03", "peer-04"]
    error_message = "peers must list peer-01 ... peer-04."
  }
  assert {
    condition     = yamldecode(output.yaml).all.children.peers.hosts["peer-04"] == { ansible_host = "192.0.2.104", cluster_address = "10.42.0.104", vcpus = 4, memory_mb = 8192 }
    error_message = "ansible_host and cluster_address must be kept apart when they differ."
  }
  assert {
    condition     = yamldecode(output.yaml).all.children.monitor.hosts.monitor.cluster_address == "10.42.0.10"
    error_message = "The monitor host must be named monitor."
  }
  assert {
    condition     = yamldecode(output.yaml).all.vars.testbed_ports == { hivemind = 4001, grafana = 4002, gloo = "40000:40100" }
    error_message = "The ports must reach the inventory as testbed_ports, as they were given."
  }
  assert {
    condition     = yamldecode(output.yaml).all.vars.testbed_cluster_cidr == "10.42.0.0/24"
    error_message = "The cluster network must reach the inventory (role cluster_firewall)."
  }
  assert {
    condition     = output.hosts["peer-02"].cluster_address == "10.42.0.102" && length(output.hosts) == 5
    error_message = "hosts must list every host by inventory name."
  }
}

run "rejects_unordered_peer_names" {
  command = plan

  variables {
    peers = [
      { name = "peer-02", ansible_host = "10.0.0.2", cluster_address = "10.0.0.2", vcpus = 1, memory_mb = 1024 },
      { name = "peer-01", ansible_host = "10.0.0.1", cluster_address = "10.0.0.1", vcpus = 1, memory_mb = 1024 },
    ]
  }

  expect_failures = [var.peers]
}

run "rejects_unpadded_peer_names" {
  command = plan

  variables {
    peers = [{ name = "peer-1", ansible_host = "10.0.0.1", cluster_address = "10.0.0.1", vcpus = 1, memory_mb = 1024 }]
  }

  expect_failures = [var.peers]
}

run "rejects_empty_peers" {
  command = plan

  variables {
    peers = []
  }

  expect_failures = [var.peers]
}

run "rejects_bad_address" {
  command = plan

  variables {
    monitor = { ansible_host = "monitor.example", cluster_address = "10.0.0.10", vcpus = 1, memory_mb = 1024 }
  }

  expect_failures = [var.monitor]
}

run "rejects_a_cluster_cidr_that_is_not_ipv4" {
  command = plan

  variables {
    cluster_cidr = "10.42.0.0"
  }

  expect_failures = [var.cluster_cidr]
}
