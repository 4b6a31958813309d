terraform {
  required_version = ">= 1.9"

  required_providers {
    # exactly the release whose schema the offline tests check against (infra/testing/README.md); the
    # modules accept ~> 1.4. Commit the .terraform.lock.hcl your first `terraform init` writes.
    opennebula = {
      source  = "OpenNebula/opennebula"
      version = "1.5.0"
    }
  }

  # State stays local (git-ignored: *.tfstate). A shared backend belongs here when several people apply.
}
