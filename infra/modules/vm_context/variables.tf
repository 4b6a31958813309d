variable "hosts" {
  description = "The VMs to contextualize: inventory name => its role (peer or monitor)."
  type        = map(string)
  nullable    = false
}

variable "ssh_user" {
  description = "The login user, with passwordless sudo and the keys (root: the keys go to root, no user is made)."
  type        = string
  nullable    = false
}

variable "ssh_public_keys" {
  description = "SSH public keys authorized for ssh_user."
  type        = list(string)
  nullable    = false
}
