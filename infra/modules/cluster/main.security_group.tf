# One security group for every VM. OpenNebula drops what no rule allows once a group applies, so:
# SSH only from admin_cidrs; Hivemind/p2p, trainer metrics, node_exporter, Prometheus, Grafana, the DDP/ZeRO
# rendezvous, torchft's Lighthouse (DiLoCo), the bandwidth probe, gloo's pair connections (the ephemeral ports, ports.gloo) and ICMP only from
# inside cluster_cidr; all outbound traffic (package installs, pip). Role cluster_firewall opens the same list on
# every host (tests/infra/test_port_list.py keeps the two the same).

locals {
  cluster_prefix_length = tonumber(split("/", var.cluster_cidr)[1])


  # OpenNebula rules take a first address and a count of addresses, not a CIDR.
  security_rules = concat(
    [
      for cidr in var.admin_cidrs : {
        purpose   = "ssh from admin ${cidr}"
        protocol  = "TCP"
        rule_type = "INBOUND"
        ip        = cidrhost(cidr, 0)
        size      = tostring(pow(2, 32 - tonumber(split("/", cidr)[1])))
        range     = "22"
      }
    ],
    [
      for service, port in var.ports : {
        purpose   = "${service} inside the cluster"
        protocol  = "TCP"
        rule_type = "INBOUND"
        ip        = cidrhost(var.cluster_cidr, 0)
        size      = tostring(pow(2, 32 - local.cluster_prefix_length))
        range     = tostring(port)
      }
    ],
    [
      {
        purpose   = "icmp inside the cluster"
        protocol  = "ICMP"
        rule_type = "INBOUND"
        ip        = cidrhost(var.cluster_cidr, 0)
        size      = tostring(pow(2, 32 - local.cluster_prefix_length))
        range     = null
      },
      {
        purpose   = "all outbound"
        protocol  = "ALL"
        rule_type = "OUTBOUND"
        ip        = null
        size      = null
        range     = null
      },
    ],
  )
}

resource "opennebula_security_group" "cluster" {
  name        = "${var.name}-cluster"
  description = "Hivemind testbed ${var.name}: SSH from admin CIDRs, cluster services inside ${var.cluster_cidr}"
  commit      = true
  tags        = local.common_tags

  dynamic "rule" {
    for_each = local.security_rules
    content {
      protocol  = rule.value.protocol
      rule_type = rule.value.rule_type
      ip        = rule.value.ip
      size      = rule.value.size
      range     = rule.value.range
    }
  }
}
