#!/usr/bin/env bash
# The test command (README, CI): installs and starts what the tests need,
# runs every test, and stops what it started. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs" >&2
  exit 1
fi

# Stand-ins for the AWS services (DynamoDB Local, moto), when this checkout
# has the adapters that need them.
if [ -x scripts/services.sh ]; then
  scripts/services.sh start
  trap 'scripts/services.sh stop' EXIT
  # shellcheck disable=SC1091
  . .tools/services.env
  export VERGENCE_REQUIRE_SERVICES=1
fi

cargo test --workspace --locked "$@"
