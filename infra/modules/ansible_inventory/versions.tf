terraform {
  # Built-in functions only: no provider, so this module plans and applies offline.
  required_version = ">= 1.9"
}
