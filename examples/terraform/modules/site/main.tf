# Stands in for real infrastructure: terraform_data is built into Terraform,
# so this plans and applies offline. Change a variable and the plan says
# which resources change.

terraform {
  # Settings come from the runtime's `backend` (terraform init -backend-config).
  backend "local" {}
}

variable "release" {
  type = string
}

variable "replicas" {
  type = number
}

variable "size" {
  type = string
}

resource "terraform_data" "site" {
  input = {
    release = var.release
    size    = var.size
  }
}

resource "terraform_data" "replica" {
  count = var.replicas
  input = "${var.release}-${var.size}-${count.index}"
}

output "replicas" {
  value = [for r in terraform_data.replica : r.output]
}
