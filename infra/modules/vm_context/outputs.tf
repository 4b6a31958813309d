output "values" {
  description = "Each VM's CONTEXT section: inventory name => key => value."
  value       = local.values
}

output "user_data" {
  description = "The cloud-config every VM gets as USER_DATA (decoded)."
  value       = local.user_data
}
