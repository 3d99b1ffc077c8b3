#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need (skipping what
# is there), starts DynamoDB Local and moto, lints the SAM template, runs
# every test, and stops what it started. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs" >&2
  exit 1
fi

# Python tools in their own virtualenv: cfn-lint (SAM template) and
# cargo-lambda (runs the Lambda binaries locally for the smoke test).
TOOLS="$PWD/.tools"
if [ ! -x "$TOOLS/py/bin/cfn-lint" ] || [ ! -x "$TOOLS/py/bin/cargo-lambda" ]; then
  python3 -m venv "$TOOLS/py"
  "$TOOLS/py/bin/pip" install --quiet 'cfn-lint==1.58.0' 'cargo-lambda==1.9.2'
fi
export PATH="$TOOLS/py/bin:$PATH"

echo "== cfn-lint template.yaml"
cfn-lint template.yaml

scripts/services.sh start
trap 'scripts/services.sh stop' EXIT
# shellcheck disable=SC1091
. .tools/services.env
export VERGENCE_REQUIRE_SERVICES=1

echo "== cargo test --workspace"
cargo test --workspace --locked "$@"
