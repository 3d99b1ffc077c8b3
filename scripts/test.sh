#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need (skipping what
# is there), builds the workspace once, starts DynamoDB Local and moto, lints
# the SAM template, runs every test, and stops what it started. Safe to
# rerun.
#
# The installs only wait on the network: they run in the background while
# cargo compiles (their output is in .tools/logs/ and shown if one fails).
# With VERGENCE_LINT=1 (what .ci/run sets) the one build is also clippy's:
# clippy-driver compiles the workspace's own crates with warnings denied,
# so the lints cost no second build of the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs" >&2
  exit 1
fi

TOOLS="$PWD/.tools"
LOGS="$TOOLS/logs"
mkdir -p "$LOGS"
started=$(date +%s)
step() { echo "== $* ($(($(date +%s) - started)) s)"; }

# Python tools in their own virtualenv: cfn-lint (the SAM template),
# schemathesis (the served API against docs/openapi.json), and moto with
# aws-sam-translator for the deployed-stack tests (tests/stack/: the
# template expanded and deployed into an account with IAM enforced).
PYTHON_TOOLS=('cfn-lint==1.58.0' 'schemathesis==4.32.5' 'moto[server]==5.2.5'
  'aws-sam-translator==1.115.0')
install_python_tools() {
  if [ -x "$TOOLS/py/bin/cfn-lint" ] && [ -x "$TOOLS/py/bin/schemathesis" ] \
    && [ -x "$TOOLS/py/bin/moto_server" ] \
    && "$TOOLS/py/bin/python3" -c 'import samtranslator' 2>/dev/null; then
    return
  fi
  python3 -m venv "$TOOLS/py"
  "$TOOLS/py/bin/pip" install --quiet --disable-pip-version-check "${PYTHON_TOOLS[@]}"
}

# The status page's browser test (cli/tests/cli/browser.rs): Debian's
# chromium, driven headless by playwright-core from npm, which uses that
# chromium (it downloads no browser of its own). Then the stand-ins
# (scripts/services.sh), one apt-get after the other; and Prometheus.
PLAYWRIGHT_CORE_VERSION=1.65.1
install_browser_and_services() {
  if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq chromium
  fi
  if ! command -v node >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq nodejs npm
  fi
  # The metric protections' tests run a real Prometheus (and Alertmanager)
  # of their own: Debian's packages, started by the tests, not as services.
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v prometheus-alertmanager >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager
  fi
  if [ "$(node -p "try { require('$TOOLS/node/node_modules/playwright-core/package.json').version } catch (e) { '' }")" \
    != "$PLAYWRIGHT_CORE_VERSION" ]; then
    npm install --silent --no-audit --no-fund --prefix "$TOOLS/node" "playwright-core@$PLAYWRIGHT_CORE_VERSION"
  fi
  scripts/services.sh install
}

declare -A installing=()
in_background() {
  local name="$1"
  shift
  (set -euo pipefail; "$@") >"$LOGS/install-$name.log" 2>&1 &
  installing[$name]=$!
}
wait_for_installs() {
  local name
  for name in "${!installing[@]}"; do
    if ! wait "${installing[$name]}"; then
      echo "error: installing $name failed:" >&2
      cat "$LOGS/install-$name.log" >&2
      exit 1
    fi
  done
}
in_background python-tools install_python_tools
in_background browser-and-services install_browser_and_services
# cargo-fuzz is compiled (about 50 s of both cores): at a lower priority
# beside the workspace build, which leaves a core idle while it links,
# rather than at the head of the fuzz run below.
in_background cargo-fuzz nice -n 10 scripts/fuzz.sh --install

if [ "${VERGENCE_LINT:-0}" = 1 ]; then
  export RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
  # cargo clippy's own way of handing clippy-driver its arguments: `-D warnings`.
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi

# Every target of every crate, once: the tests run the binaries of other
# crates (the Lambda functions, vergence-agent) from target/debug, and the
# benchmarks below use this same build.
step "cargo build --workspace --all-targets"
cargo build --workspace --all-targets --locked

step "waiting for the installs"
wait_for_installs
export PATH="$TOOLS/py/bin:$PATH"

step "cfn-lint template.yaml"
cfn-lint template.yaml

# A short seeded run: config YAML, templates, fetch output (fuzz/). Its own
# workspace and build (without the lint wrapper), in the background at a
# lower priority: it takes the CPU the tests, which mostly wait on
# processes and servers, leave. Its output is shown at the end.
step "fuzz, in the background"
setsid env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS nice -n 10 scripts/fuzz.sh \
  >"$LOGS/fuzz.log" 2>&1 &
fuzzing=$!
cleanup() {
  # Its own session (setsid): the whole run, cargo and fuzzers included.
  kill -- -"$fuzzing" 2>/dev/null || true
  scripts/services.sh stop
}

step "starting the stand-ins"
scripts/services.sh start
trap cleanup EXIT
# shellcheck disable=SC1091
. .tools/services.env
export VERGENCE_REQUIRE_SERVICES=1

# Every test of every crate in one pool (.config/nextest.toml); the doc
# tests, which nextest does not run, after it. Without cargo-nextest (it
# comes with this project's machines), cargo test runs the same tests.
if cargo nextest --version >/dev/null 2>&1; then
  step "cargo nextest run --workspace"
  cargo nextest run --workspace --locked "$@"
  step "cargo test --workspace --doc"
  cargo test --workspace --locked --doc
else
  step "cargo test --workspace"
  cargo test --workspace --locked "$@"
fi

# Every benchmark row once, on small inputs with the debug builds above, so
# a benchmark that no longer runs fails here; the numbers themselves come
# from the full run (scripts/bench.py, docs/performance.md). It runs
# while the fuzz run ends: smoke numbers are compared to nothing.
step "benchmarks, smoke mode"
python3 scripts/bench.py --smoke

step "waiting for the fuzz run"
if ! wait "$fuzzing"; then
  cat "$LOGS/fuzz.log" >&2
  echo "error: fuzzing failed (its log is above and in $LOGS/fuzz.log)" >&2
  exit 1
fi
grep -E '^[a-z_]+: (ok|FAILED)' "$LOGS/fuzz.log" || true
step "done"
