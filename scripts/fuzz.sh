#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz, libFuzzer) of what Vergence reads from
# outside: config YAML, the templates in it, a structured fetch's stdout, and
# config directories of odd file types (FIFOs, devices, links out and loops).
#
#   scripts/fuzz.sh              CI mode: 30 s per target, libFuzzer seed 1
#   scripts/fuzz.sh 300          5 minutes per target, random seed
#   FUZZ_SEED=7 scripts/fuzz.sh 300   the same, seeded
#   scripts/fuzz.sh 60 template  only the named target(s)
#   scripts/fuzz.sh --install    only install cargo-fuzz (the test command
#                                does it while the workspace builds)
#
# Installs its pinned cargo-fuzz into .tools/ (skipped when there), builds
# the targets in fuzz/target, seeds each corpus from examples/ and the docs,
# runs the targets one after another, prints how many inputs each ran and
# fails if any crashed (the input is kept under fuzz/artifacts/<target>/).
set -euo pipefail
cd "$(dirname "$0")/.."

INSTALL_ONLY=0
if [ "${1:-}" = --install ]; then INSTALL_ONLY=1; shift; fi

# Without arguments this is CI's run: the same seed every time, so that a
# failure repeats. Otherwise libFuzzer picks one (seed 0) unless FUZZ_SEED.
[ $# -gt 0 ] || FUZZ_SEED="${FUZZ_SEED:-1}"
FUZZ_SEED="${FUZZ_SEED:-0}"
SECONDS_PER_TARGET="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(compile_config template structured_fetch config_dir)

CARGO_FUZZ_VERSION=0.13.2
TOOLS="$PWD/.tools/cargo-fuzz"
if ! "$TOOLS/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
  cargo install --quiet --locked --root "$TOOLS" cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
export PATH="$TOOLS/bin:$PATH"
[ "$INSTALL_ONLY" = 0 ] || exit 0

# Stable Rust, the one toolchain these machines have: cargo fuzz needs
# nightly only for a sanitizer (`-Zsanitizer`); its coverage instrumentation
# is stable `-C` options. Safe Rust needs no AddressSanitizer, and debug
# assertions still catch arithmetic overflow.
FUZZ_FLAGS=(--sanitizer none --debug-assertions --fuzz-dir fuzz)

# Seeds that follow the docs and examples as they change: each example file
# and the quickstart as one file, every ```yaml block of the docs, every line
# with a template in them, and the docs' JSON blocks with fetch output.
seed_corpus() {
  local config=fuzz/corpus/compile_config template=fuzz/corpus/template
  local fetch=fuzz/corpus/structured_fetch
  mkdir -p "$config" "$template" "$fetch"
  local file name
  while IFS= read -r file; do
    name=$(echo "$file" | tr '/' '_')
    cp "$file" "$config/seed-$name"
  done < <(find examples -name '*.yaml' -not -path '*/deployed/*' | sort)
  for file in examples/quickstart/*.yaml; do cat "$file"; echo "---"; done \
    > "$config/seed-quickstart-bundle"
  local docs
  docs=$(find docs -name '*.md' | sort)
  # shellcheck disable=SC2086
  awk -v out="$config/seed-docs-yaml-" '
    /^```yaml/ { n++; inside = 1; next }
    /^```/ { inside = 0; next }
    inside { print > (out n) }' $docs
  # shellcheck disable=SC2086
  grep -h '{{' $(find examples -name '*.yaml' -not -path '*/deployed/*') $docs |
    sed 's/^[[:space:]-]*//' | sort -u |
    awk -v out="$template/seed-line-" '{ printf "%s", $0 > (out NR); close(out NR) }'
  # shellcheck disable=SC2086
  awk -v out="$fetch/seed-docs-json-" '
    /^```json/ { n++; inside = 1; next }
    /^```/ { inside = 0; next }
    inside { print > (out n) }' $docs
  grep -l '"objects"' "$fetch"/seed-docs-json-* 2>/dev/null >/dev/null ||
    echo "note: no fetch output found in the docs' JSON blocks" >&2
  # The config's keys as a libFuzzer dictionary, so that mutations write
  # fields the schema knows rather than waiting to spell them by chance.
  grep -ohE '[A-Za-z][A-Za-z0-9]*:' "$config"/seed-* | sort -u |
    awk '{ print "\"" $0 " \"" } END { print "\"---\\x0a\""; print "\"- \"" }' \
    > fuzz/corpus/compile_config.dict
}
seed_corpus

echo "== cargo fuzz build"
start=$(date +%s)
cargo fuzz build "${FUZZ_FLAGS[@]}"
echo "fuzz build took $(( $(date +%s) - start )) s"

mkdir -p fuzz/logs
failed=()
for target in "${TARGETS[@]}"; do
  echo "== fuzz $target for ${SECONDS_PER_TARGET} s (seed $FUZZ_SEED)"
  log="fuzz/logs/$target.log"
  # -timeout and -rss_limit_mb make a slow or memory-hungry input a
  # failure like a panic: hostile config must not hang or exhaust a worker.
  mkdir -p "fuzz/corpus/$target"
  corpora=("fuzz/corpus/$target")
  [ ! -d "fuzz/seeds/$target" ] || corpora+=("fuzz/seeds/$target")
  dict="fuzz/dicts/$target.dict"
  [ -f "$dict" ] || dict="fuzz/corpus/$target.dict"
  # config_dir's input is a list of operations, not text: no dictionary.
  dict_option=()
  [ ! -f "$dict" ] || dict_option=(-dict="$dict")
  if cargo fuzz run "${FUZZ_FLAGS[@]}" "$target" "${corpora[@]}" -- \
    "${dict_option[@]}" -seed="$FUZZ_SEED" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
    -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$target")
    grep -E -A30 'panicked|ERROR: libFuzzer|==ERROR' "$log" | head -60 >&2 || true
    grep -E 'Test unit written to' "$log" >&2 || true
  fi
  stat_of() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  echo "$target: $status, $(stat_of number_of_executed_units) inputs run," \
    "slowest $(stat_of slowest_unit_time_sec) s, peak $(stat_of peak_rss_mb) MB," \
    "${cov:-no coverage line} (log: $log)"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing failed: ${failed[*]}; reproduce with" >&2
  echo "  PATH=$TOOLS/bin:\$PATH cargo fuzz run ${FUZZ_FLAGS[*]} <target> fuzz/artifacts/<target>/<file>" >&2
  exit 1
fi
