terraform {
  # Cross-variable validation (one input checked against another) needs Terraform 1.9.
  required_version = ">= 1.9"

  required_providers {
    opennebula = {
      source  = "OpenNebula/opennebula"
      version = "~> 1.4"
    }
  }
}
