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

# Python tools in their own virtualenv: cfn-lint (SAM template),
# cargo-lambda (runs the Lambda binaries locally for the smoke test) and
# schemathesis (the served API against docs/openapi.json).
TOOLS="$PWD/.tools"
if [ ! -x "$TOOLS/py/bin/cfn-lint" ] || [ ! -x "$TOOLS/py/bin/cargo-lambda" ] \
  || [ ! -x "$TOOLS/py/bin/schemathesis" ]; then
  python3 -m venv "$TOOLS/py"
  "$TOOLS/py/bin/pip" install --quiet 'cfn-lint==1.58.0' 'cargo-lambda==1.9.2' \
    'schemathesis==4.32.5'
fi
export PATH="$TOOLS/py/bin:$PATH"

# The status page's browser test (cli/tests/browser.rs): Debian's chromium,
# driven headless by playwright-core from npm, which uses that chromium
# (it downloads no browser of its own).
PLAYWRIGHT_CORE_VERSION=1.65.1
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq chromium
fi
if ! command -v node >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq nodejs npm
fi
if [ "$(node -p "try { require('$TOOLS/node/node_modules/playwright-core/package.json').version } catch (e) { '' }")" \
  != "$PLAYWRIGHT_CORE_VERSION" ]; then
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/node" "playwright-core@$PLAYWRIGHT_CORE_VERSION"
fi

echo "== cfn-lint template.yaml"
cfn-lint template.yaml

scripts/fuzz.sh # short seeded run: config YAML, templates, fetch output (fuzz/)

scripts/services.sh start
trap 'scripts/services.sh stop' EXIT
# shellcheck disable=SC1091
. .tools/services.env
export VERGENCE_REQUIRE_SERVICES=1

echo "== cargo test --workspace"
cargo test --workspace --locked "$@"

# Every benchmark row once, on small inputs with the debug builds above, so
# a benchmark that no longer runs fails here; the numbers themselves come
# from the full run (scripts/bench.py, docs/performance.md).
echo "== benchmarks, smoke mode"
python3 scripts/bench.py --smoke
