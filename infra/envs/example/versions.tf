terraform {
  required_version = ">= 1.9"

  required_providers {
    opennebula = {
      source  = "OpenNebula/opennebula"
      version = "~> 1.4"
    }
  }

  # State stays local (git-ignored: *.tfstate). A shared backend belongs here when several people apply.
}
